"""Domain objects, readers and writers of the real formats, resource arithmetic and the checker.\n\nNothing here knows about Pyomo."""
