"""Stand-in of the ``natten`` package as the port meets it on a Mac: ``na2d`` (NATTEN >= 0.20's
fused neighbourhood attention) exists but its ``cutlass-fna`` kernels need CUDA, so a call
raises. The port's ``load_runtime_deps`` rebinds ``natten.na2d`` before NAF is loaded (see
``generate_mps.py``); only that rebinding makes NAF run here, as on the Mac."""


def na2d(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
         backend=None, **kwargs):
    raise NotImplementedError(f"natten.na2d: backend {backend!r} needs CUDA and libnatten; "
                              f"this machine has neither")
