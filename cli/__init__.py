"""The command line: parse, call one function of spool/ or runner/, render."""
