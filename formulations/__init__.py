"""One Pyomo model per problem; no solver calls here."""
