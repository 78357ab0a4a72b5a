"""Coverage-guided fuzzing of the two wire decoders (atheris/libFuzzer): ``python -m loadtest.fuzz --target ...``."""
