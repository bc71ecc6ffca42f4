"""Bareon disk layouts: the dynamic schema and hardware readers (with sandboxed yaql), the layout
checker and the output documents. Nothing here knows about Pyomo.
"""
