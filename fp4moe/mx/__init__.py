"""OCP Microscaling (MX v1.0) formats: one format concept per module.

``e8m0`` (the shared power-of-two scale), ``block_scale`` (the shared-exponent rule and its
modes), ``mxfp4`` (E2M1 elements, packed two per byte), ``mxfp8`` (E4M3 elements, the a8w4 activations).
"""
