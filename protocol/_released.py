"""Digests of every released protocol version, as constants in the code.

Why constants as well as ``protocol.lock.json``: the lock is a data file beside ``protocol.yaml``, so
one edit can change both (a number in the protocol and its digest in the lock) and the pair still
agrees. A released version's digest is also written here, checked by ``load_protocol()`` (hence
``atb protocol verify``), by the test suite and by ``atb store verify``. Releasing a version means
adding its line here in the same commit that locks it; a draft version (not listed) loads but is
reported as unreleased.
"""

from __future__ import annotations

RELEASED: dict[str, str] = {
    "1.0.0": "39499b15ff040e339d2e845034a40a6871a0fce385ca09db4e2d3aa7b6558756",
    "1.1.0": "60ffe28141827b05fb0dedf318da2f31df3e6c694dcfd38c1eb0647812eb01bb",
    "1.2.0": "bfda53f6a640605b43bf76d395aae8a34909e0722b68fcd1eb8d2786984a6705",
    "1.3.0": "195eeeed2bed3b8c93baccfcdb80bf69480170e184e17d1be685d8f18d030cae",
    "1.4.0": "e541dbfa4cf74493673dc66f679f2860e67b203ea09b9766bfcdd388e5a25808",
    "1.5.0": "b5dafee9382e1055800ee6115d6514a479376feb08d8f94a78c6d02ba4569869",
    "1.6.0": "7359f76e637e3be1ffc3045e8c83e99398d27dbbfc06ad0f1ebcecafb4bf79e9",
    "1.7.0": "e80070a922c9c73a6ec953675c6cba374957f5d8ed9c4b0fdd1efb41ee4d7074",
    "1.8.0": "031914f3ad81f31119bce3aca5a1b0dacc3bb966c10a03ebfb89d849188ad5c3",
}

__all__ = ["RELEASED"]
