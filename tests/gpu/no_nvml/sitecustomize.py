"""Put first on a child interpreter's PYTHONPATH: `import pynvml` fails there (ModuleNotFoundError), as on a node
without NVML, whatever the host has (tests/gpu run on a real GPU machine too)."""

import sys

sys.modules["pynvml"] = None  # type: ignore[assignment]
