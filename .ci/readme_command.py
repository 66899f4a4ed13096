"""Print the README's set-up command number N (1 or 2), exactly as printed under "## Two commands".

.ci/run runs command 2 from here, so CI installs and tests exactly as a new user does."""
import re
import sys
from pathlib import Path

readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
section = readme.split("## Two commands\n", 1)[1].split("\n## ", 1)[0]
commands = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
if len(commands) != 2:
    sys.exit(f"README.md: expected two set-up commands under '## Two commands', found {len(commands)}")
print(commands[int(sys.argv[1]) - 1].strip())
