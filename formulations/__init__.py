"""One Pyomo model per problem; no solver calls here.

Every formulation module keeps one contract, so that a solve strategy (solvers/strategies/) can
drive any of them the same way:

* `build(problem) -> pyo.ConcreteModel`: the model from plain `model/` data. It is assembled by
  one `define_<family>(m, problem)` function per family of constraints, whose docstring states
  the inequality; each constraint carries its equation in a one-line comment. Nothing but Pyomo
  components is attached to the model.
* `objectives(m, problem) -> list[Objective]`: the lexicographic stages, in order.
* `solution(m, problem)`: the variables read back into plain data the strategy turns into
  `model/` terms (placements, moves, layouts) for the checker.

A module with several models (an exact one and a bound, a single and a batch form) prefixes the
second set: `build_<name>`, `<name>_objectives`, `<name>_solution`.
"""
