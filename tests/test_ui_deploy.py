"""The team deployment under deploy/ is a working configuration: Debian's nginx accepts both server files as
written (`nginx -t`, with their /etc paths moved into a temporary folder and a throwaway certificate), and the
systemd unit starts `erroranalysis ui` with flags it has. tests/test_ui_proxy.py runs the shared snippet for real.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from erroranalysis.cli.app import app

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def _moved(text: str, tmp: Path) -> str:
    """The config with every /etc path it names moved under tmp (the files created there)."""
    for path in sorted(set(re.findall(r"/etc/[\w./-]+", text))):
        target = tmp / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_text("")
        text = text.replace(path, str(target))
    return text


@pytest.mark.parametrize("server", ["basic-auth.conf", "oauth2-proxy.conf"])
def test_nginx_accepts_the_server_files(server, tmp_path):
    if not Path(NGINX).exists():
        pytest.skip("Debian nginx is not installed (make nginx)")
    prefix = tmp_path / "nginx"
    (prefix / "snippets").mkdir(parents=True)
    (prefix / "conf.d").mkdir()
    (prefix / "snippets" / "erroranalysis-proxy.conf").write_text(
        _moved((DEPLOY / "nginx" / "erroranalysis-proxy.conf").read_text(), tmp_path))
    conf_text = _moved((DEPLOY / "nginx" / server).read_text(), tmp_path)
    (prefix / "conf.d" / server).write_text(conf_text)
    cert = re.search(r"ssl_certificate\s+(\S+);", conf_text).group(1)
    key = re.search(r"ssl_certificate_key\s+(\S+);", conf_text).group(1)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=erroranalysis.example.com"],
                   check=True, capture_output=True)
    secret_conf = tmp_path / "etc" / "erroranalysis" / "nginx-proxy-secret.conf"
    secret_conf.write_text('proxy_set_header X-Erroranalysis-Proxy-Secret "0123456789abcdef0123456789abcdef";\n')
    (prefix / "nginx.conf").write_text(
        f"pid {prefix / 'nginx.pid'};\nerror_log {prefix / 'error.log'};\nevents {{}}\n"
        f"http {{\n    access_log off;\n    include conf.d/*.conf;\n}}\n")
    done = subprocess.run([NGINX, "-t", "-q", "-e", str(prefix / "error.log"), "-c", str(prefix / "nginx.conf"),
                           "-p", str(prefix)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr + (prefix / "error.log").read_text()


def test_the_systemd_unit_uses_flags_the_command_has():
    unit = (DEPLOY / "systemd" / "erroranalysis-ui.service").read_text()
    command = re.search(r"ExecStart=(.*?)\n(?!\s)", unit, re.S).group(1).replace("\\\n", " ")
    words = command.split()
    assert words[0].endswith("/erroranalysis") and words[1] == "ui"
    help_text = CliRunner().invoke(app, ["ui", "--help"], env={"COLUMNS": "300"}).output
    flags = [w for w in words if w.startswith("--")]
    assert {"--trusted-user-header", "--proxy-secret-file", "--labels-db"} <= set(flags)
    for flag in flags:
        assert flag in help_text, flag
