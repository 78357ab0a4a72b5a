"""`python -m loadtest.bench <suite> [--quick] [--out FILE]`: benchmark suites that print a table and write JSON."""
