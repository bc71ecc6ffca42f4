"""Solve strategies: how each problem is solved, apart from its math and from its program.

One module per problem. A strategy builds the problem's model through `formulations/`, runs the
solvers (`solvers.solve`, `solve_lexicographic`) in whatever rounds, pinning, decomposition or
fallbacks the problem needs, reads the solution back through the formulation's `solution()` into
`model/` terms and has the independent checker judge it. Programs call a strategy and print.
"""
