"""Where a test run's time goes: a pytest --junitxml file's test times summed by file and by
test function (docs/reliability.md, "Test run time"), the grouping --durations does not give.

    python benchmarks/time_by_file.py run.xml [files shown] [functions shown]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def main(argv: list[str]) -> None:
    """Print the total, then the files and the functions costing most (seconds, tests)."""
    root = ET.parse(argv[0]).getroot()
    files_shown = int(argv[1]) if len(argv) > 1 else 40
    functions_shown = int(argv[2]) if len(argv) > 2 else 60
    by_file: Counter[str] = Counter()
    tests_of_file: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    tests_of_function: Counter[str] = Counter()
    for case in root.iter("testcase"):
        seconds = float(case.get("time", 0))
        classname = case.get("classname", "")
        file = classname.split(".")[1] if classname.startswith("tests.") else classname
        function = f"{file}::{case.get('name', '').split('[')[0]}"
        by_file[file] += seconds
        tests_of_file[file] += 1
        by_function[function] += seconds
        tests_of_function[function] += 1
    print(f"total {sum(by_file.values()):.0f} s over {sum(tests_of_file.values())} tests")
    for file, seconds in by_file.most_common(files_shown):
        print(f"{seconds:8.1f} {tests_of_file[file]:5d} {file}")
    print("--- functions (seconds, tests, seconds a test)")
    for function, seconds in by_function.most_common(functions_shown):
        count = tests_of_function[function]
        print(f"{seconds:8.1f} {count:5d} {seconds / count:6.2f} {function}")


if __name__ == "__main__":
    main(sys.argv[1:])
