from standin_hf import ballast  # noqa: F401
