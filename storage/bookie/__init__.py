"""Bookie server: journal with group commit, entry logs + index, fencing, cookie, registration, read-only mode, GC."""
