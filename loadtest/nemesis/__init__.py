"""`python -m loadtest.nemesis`: a seeded fault schedule against a real cluster, and a checker that reads the history."""
