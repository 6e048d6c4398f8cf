"""Support code of the erroranalysis app: configuration, session-state keys, cached data access, chart builders and
small rendering helpers. Pages under ui/pages/ only render; the work is done by the erroranalysis library."""
