"""irshard's version, where every floor can read it (pyproject.toml says the
same; a test checks that)."""

VERSION = "0.1.0"
