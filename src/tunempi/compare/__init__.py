"""A/B comparison of an application itself (`tunempi compare`): the library's default against tuning
directories and env files, interleaved in shuffled blocks, with the paired evidence rule and the
application's results checked unchanged. docs/compare.md."""
