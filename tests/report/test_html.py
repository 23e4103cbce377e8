"""report.html opened in headless Chromium: the plots are real, decodable images."""

import subprocess

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]


def test_report_html_renders_its_plots_in_chromium(reported_run, chromium, tmp_path):
    run_dir, _ = reported_run
    page = (run_dir / "report.html").resolve().as_uri()
    # The DOM after Chromium parsed it: each figure an <img> with a base64 PNG; the script reports how
    # many of them the browser decoded (naturalWidth > 0).
    probe = tmp_path / "probe.html"
    probe.write_text(
        "<html><body><script>"
        "const f=document.createElement('iframe');f.src=" + repr(page) + ";document.body.appendChild(f);"
        "f.onload=()=>{const imgs=[...f.contentDocument.images];document.title="
        "'decoded:'+imgs.filter(i=>i.complete&&i.naturalWidth>0).length+'/'+imgs.length;};"
        "</script></body></html>")
    dom = subprocess.run([chromium, *FLAGS, "--allow-file-access-from-files", "--virtual-time-budget=5000",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=60)
    assert dom.returncode == 0, dom.stderr[-500:]
    assert "<title>decoded:7/7</title>" in dom.stdout, dom.stdout[:300]
