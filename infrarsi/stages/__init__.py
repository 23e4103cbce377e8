"""One module per CLI stage: ``run(...) -> exit code``. They call the packages that do the work."""
