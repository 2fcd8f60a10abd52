"""The timeline's colours stay apart for every viewer: each two categories a timeline can show
(simulator/viz/style.py's PHASE_COLORS and GAP_COLORS, the one home of the palette) differ by at
least 10 CIELAB units for normal vision and under simulated protanopia, deuteranopia and
tritanopia (Machado, Oliveira & Fernandes 2009, severity 1: the matrices act on linear RGB)."""

import itertools

import numpy as np

from simulator.viz import GAP_COLORS, PHASE_COLORS

MACHADO = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}
SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
WHITE_D65 = np.array([0.95047, 1.0, 1.08883])


def linear_rgb(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255.0
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def cielab(rgb: np.ndarray) -> np.ndarray:
    xyz = SRGB_TO_XYZ @ np.clip(rgb, 0.0, 1.0) / WHITE_D65
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_the_helpers_measure_what_they_say():
    assert np.allclose(cielab(linear_rgb("#FFFFFF")), [100, 0, 0], atol=0.1)
    assert np.allclose(cielab(linear_rgb("#000000")), [0, 0, 0], atol=1e-9)
    red, green = linear_rgb("#E45756"), linear_rgb("#54A24B")  # the old comm and wgrad: apart for most,
    deut = MACHADO["deuteranopia"]                              # one colour for a deuteranope
    assert np.linalg.norm(cielab(red) - cielab(green)) > 50
    assert np.linalg.norm(cielab(deut @ red) - cielab(deut @ green)) < 2
    old_lost, old_exposed = linear_rgb("#F4B6B4"), linear_rgb("#F8C9C8")  # the faults page's old pair
    assert min(np.linalg.norm(cielab(m @ old_lost) - cielab(m @ old_exposed)) for m in MACHADO.values()) < 10


def test_every_two_timeline_categories_are_distinct_for_every_viewer():
    shown = {k: c for k, c in PHASE_COLORS.items() if k != "idle"} | GAP_COLORS  # idle: the background
    close = []
    for (a, ca), (b, cb) in itertools.combinations(shown.items(), 2):
        for vision, m in MACHADO.items():
            d = float(np.linalg.norm(cielab(m @ linear_rgb(ca)) - cielab(m @ linear_rgb(cb))))
            if d < 10.0:
                close.append(f"{a} {ca} ~ {b} {cb} for {vision}: {d:.1f}")
    assert not close, close
    assert len(set(shown.values())) == len(shown)


def test_the_failed_attempt_stands_out_from_exposed_communication():  # the faults page's point
    lost, exposed = linear_rgb(PHASE_COLORS["lost"]), linear_rgb(GAP_COLORS["exposed communication"])
    assert min(np.linalg.norm(cielab(m @ lost) - cielab(m @ exposed)) for m in MACHADO.values()) > 30
