"""Images given with a task (`--image`): decoded by Pillow, size-capped, never waited on.

Real files everywhere: images written by Pillow, a FIFO, a device, a sparse 100 MB file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from PIL import Image

from amb_dspy.errors import InputError
from amb_dspy.task.images import MAX_IMAGE_BYTES, ImageStager, read_image


@pytest.fixture
def images(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for fmt, suffix in (("PNG", "png"), ("JPEG", "jpg"), ("GIF", "gif"), ("WEBP", "webp"), ("BMP", "bmp"),
                        ("TIFF", "tiff")):
        made[fmt] = tmp_path / f"poster.{suffix}"
        Image.new("RGB", (8, 6), "teal").save(made[fmt], format=fmt)
    return made


@pytest.mark.parametrize("fmt, name", [("PNG", "png"), ("JPEG", "jpeg"), ("GIF", "gif"), ("WEBP", "webp"),
                                       ("BMP", "bmp")])
def test_real_images_are_accepted_with_their_format_and_bytes(images, fmt, name):
    kind, data = read_image(images[fmt])
    assert kind == name and data == images[fmt].read_bytes()


def _refusal(path: Path, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        read_image(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"image {path}: ")
    return message


def test_a_text_file_starting_with_an_image_signature_is_refused(tmp_path):
    for name, head in (("notes.bmp", b"BM"), ("notes.png", b"\x89PNG\r\n\x1a\n"), ("notes.gif", b"GIF89a")):
        path = tmp_path / name
        path.write_bytes(head + b" these are meeting notes, not a picture\n" * 20)
        assert "not" in _refusal(path)


def test_a_fake_png_with_a_valid_header_and_a_garbage_body_is_refused(images, tmp_path):
    real = images["PNG"].read_bytes()
    fake = tmp_path / "fake.png"
    fake.write_bytes(real[:33] + os.urandom(3_000_000))  # signature and IHDR chunk, then 3 MB of noise
    assert "not a" in _refusal(fake)
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(real[:-20])
    assert "not a valid image" in _refusal(truncated)


def test_a_100_mb_file_is_refused_from_its_size_before_it_is_read(images, tmp_path):
    big = tmp_path / "huge.png"
    with big.open("wb") as handle:
        handle.write(images["PNG"].read_bytes())
        handle.truncate(100_000_000)  # sparse: no disk used
    assert f"100.0 MB is over the {MAX_IMAGE_BYTES / 1e6:g} MB limit" in _refusal(big)
    noisy = tmp_path / "noise.png"
    Image.frombytes("RGB", (300, 300), os.urandom(300 * 300 * 3)).save(noisy)  # about 270 kB
    assert "MB is over the 0.1 MB limit" in _refusal(noisy, max_bytes=100_000)


def test_other_formats_are_named(images):
    assert "a TIFF image; only PNG, JPEG, GIF, WEBP and BMP are accepted" in _refusal(images["TIFF"])


def test_a_fifo_or_a_device_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "poster.png"
    os.mkfifo(fifo)
    outcome: list[str] = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked in open(): let it go before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("reading the FIFO blocked")
    assert "not a regular file" in outcome[0]
    assert "not a regular file" in _refusal(Path("/dev/zero"))
    assert "is a directory" in _refusal(tmp_path)
    assert "no such file" in _refusal(tmp_path / "missing.png")


def test_staging_checks_every_image_first_and_copies_the_checked_bytes(images, tmp_path):
    adapter = ImageStager(temp_dir=tmp_path / "temp", storage_dir=tmp_path / "storage")
    text = tmp_path / "notes.bmp"
    text.write_bytes(b"BM not an image")
    with pytest.raises(InputError, match="notes.bmp"):
        adapter.stage_images("doc", [images["PNG"], text])
    assert not (tmp_path / "temp").exists()  # nothing copied when one image is bad
    [staged] = adapter.stage_images("doc", [images["JPEG"]])
    assert staged.format == "jpeg" and staged.temp_path.read_bytes() == images["JPEG"].read_bytes()


def test_a_new_stager_removes_what_a_killed_process_left_staged(images, tmp_path):
    import subprocess
    import sys

    first = ImageStager(temp_dir=tmp_path / "temp", storage_dir=tmp_path / "storage")
    [staged] = first.stage_images("killed", [images["PNG"]])
    [alive] = first.stage_images("running", [images["PNG"]])
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (staged.temp_path.parent / ".owner").write_text(gone.stdout.strip())  # as if kill -9 had ended its stager
    (tmp_path / "temp" / "not-ours").mkdir()
    ImageStager(temp_dir=tmp_path / "temp", storage_dir=tmp_path / "storage")
    assert not staged.temp_path.parent.exists()
    assert alive.temp_path.exists() and (tmp_path / "temp" / "not-ours").is_dir()
