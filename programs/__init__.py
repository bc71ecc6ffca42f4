"""One program per tool over the shared core: build, solve, check, report."""
