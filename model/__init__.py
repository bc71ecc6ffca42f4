"""Domain objects, readers/writers of the real formats, resource arithmetic, checkers.

Nothing here knows about Pyomo.
"""
