"""The site catalog (`tunempi catalog`): one library build's tunings of many layouts, grown across allocations,
built into one tuning directory, its coverage of the site's jobs (docs/catalog.md)."""
