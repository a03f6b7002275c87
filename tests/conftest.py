"""Unit tests run on 8 emulated CPU devices, set before any JAX computation."""

import tpviz

tpviz.setup_devices(8, verbose=False)
