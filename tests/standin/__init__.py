"""A store kind outside the package, run through the engine as a new kind would be."""
