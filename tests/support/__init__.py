"""Code the tests share: raw client and record helpers, fixtures, and the scripts some tests
run as subprocesses (see tests/README.md)."""
