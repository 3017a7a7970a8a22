"""Print the pip extra matching this machine's CUDA driver ('cuda12', 'cuda13') or nothing.

Used by the Makefile so that ``make train`` installs CuPy only where a GPU can use it.
"""

import re
import shutil
import subprocess

if shutil.which("nvidia-smi"):
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    match = re.search(r"CUDA Version:\s*(\d+)", out)
    if match and int(match.group(1)) >= 13:
        print("cuda13")
    elif match and int(match.group(1)) == 12:
        print("cuda12")
