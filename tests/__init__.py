"""capjudge's test suite, laid out like the package: judges/, metrics/, tasks/ and api/ hold the tests of those
folders, installed/ the installed-user and README tests, support/ the helpers every test imports
(`from tests.support.<module> import ...`), benchmarks/ the `make bench` scripts (`python -m tests.benchmarks.run`)."""
