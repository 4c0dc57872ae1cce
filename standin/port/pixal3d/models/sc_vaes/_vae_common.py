from standin_hf import add_ballast, ballast  # noqa: F401
