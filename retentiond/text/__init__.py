"""How figures and documents are written for people and programs: sizes and ages in human
units (``units``), and large JSON documents written as they are produced (``jsonstream``).
Used by the kinds' plans, ``status`` and the commands; imports nothing of the engine's
machinery."""
