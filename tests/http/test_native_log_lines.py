"""What a native library writes to stderr while it is imported (ONNX Runtime's GPU discovery warning, in colour,
in a container) reaches the log as a JSON line, not ahead of it as raw text."""

import json
import subprocess
import sys
import textwrap

NOISY = 'import os\nos.write(2, b"\\x1b[1;31m2026-12-02 [W:onnxruntime:Default, device_discovery.cc:164] no vendor\\x1b[m\\n")\n'


def test_lines_written_to_fd_2_at_import_are_caught_without_colour(tmp_path):
    (tmp_path / "noisy_native.py").write_text(NOISY)
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from attnserve.service.cli import import_capturing_native_output
        print(json.dumps(import_capturing_native_output("noisy_native")))
        print(json.dumps(import_capturing_native_output("noisy_native")))  # imported already: nothing more
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    first, second = (json.loads(line) for line in out.stdout.splitlines())
    assert first == ["2026-12-02 [W:onnxruntime:Default, device_discovery.cc:164] no vendor"] and second == []
    assert out.stderr == ""  # nothing reached the real stderr


def test_the_server_logs_them_as_json_before_anything_else(tmp_path):
    (tmp_path / "noisy_native.py").write_text(NOISY)
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from attnserve.service import cli
        cli.import_capturing_native_output = lambda _name, real=cli.import_capturing_native_output: real("noisy_native")
        sys.exit(cli.serve_main(["{tmp_path / "no-such-bundle"}", "--port", "0"]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0  # the missing bundle stops start-up, after the caught line is logged
    first = json.loads(out.stderr.splitlines()[0])
    assert first["level"] == "warning" and first["msg"].startswith("onnxruntime: 2026-12-02 [W:onnxruntime"), out.stderr
    assert "\x1b" not in out.stderr
