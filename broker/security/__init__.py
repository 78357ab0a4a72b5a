"""Authentication, authorization and TLS for the broker (docs/security.md)."""
