"""Screenshots of an X display as PNG, without ImageMagick: `xwd -root` (x11-apps) read here."""
import struct
import subprocess

from PIL import Image


def grab(display):
    """The whole screen of `display` as a PIL image."""
    data = subprocess.run(["xwd", "-root", "-silent", "-display", display], check=True, capture_output=True,
                          timeout=30).stdout
    header = struct.unpack(">25I", data[:100])
    header_size, _, pixmap_format, depth, width, height = header[:6]
    byte_order, bits_per_pixel, bytes_per_line = header[7], header[11], header[12]
    ncolors = header[19]
    if pixmap_format != 2 or bits_per_pixel not in (24, 32):
        raise ValueError("xwd format %d with %d bits per pixel is not read here" % (pixmap_format, bits_per_pixel))
    offset = header_size + ncolors * 12
    pixels = data[offset:offset + bytes_per_line * height]
    if bits_per_pixel == 32:
        raw_mode = "BGRX" if byte_order == 0 else "XRGB"
    else:
        raw_mode = "BGR" if byte_order == 0 else "RGB"
    return Image.frombuffer("RGB", (width, height), pixels, "raw", raw_mode, bytes_per_line, 1)


def save(display, path):
    """Saves the screen to `path`; returns the image."""
    image = grab(display)
    image.save(path)
    return image


def colours(image):
    """How many distinct colours (a blank screen has one)."""
    return len(set(image.resize((320, 240)).getdata()))


def side_by_side(images):
    """One picture of `images` next to each other, on white."""
    width = sum(image.width for image in images) + 16 * (len(images) - 1)
    height = max(image.height for image in images)
    picture = Image.new("RGB", (width, height), "white")
    x = 0
    for image in images:
        picture.paste(image.convert("RGB"), (x, 0))
        x += image.width + 16
    return picture
