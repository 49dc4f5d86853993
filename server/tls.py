"""The TLS files of `serve --tls-cert F --tls-key F`, checked before the server starts, so a
wrong one is named (the TLS library says only "[SSL] PEM lib")."""

from __future__ import annotations

import ssl
from pathlib import Path

from ledger.errors import InvalidInput

_CERT = "-----BEGIN CERTIFICATE-----"
_KEY_END = "PRIVATE KEY-----"
_ENCRYPTED = "-----BEGIN ENCRYPTED PRIVATE KEY-----"


def check_tls_files(cert: Path, key: Path) -> None:
    """InvalidInput naming the file that is not what its option needs: a missing or unreadable
    file, a certificate given as the key or the other way round, an encrypted key, a key that
    does not belong to the certificate."""
    cert_text, key_text = _read(cert, "--tls-cert"), _read(key, "--tls-key")
    swapped = _CERT in key_text and _KEY_END in cert_text
    if _CERT not in cert_text:
        holds = "a private key" if _KEY_END in cert_text else "no PEM certificate"
        hint = ": are --tls-cert and --tls-key swapped?" if swapped else \
            f" ({_CERT} ...)"
        raise InvalidInput(f"--tls-cert {str(cert)!r} holds {holds}, not a certificate{hint}")
    if _KEY_END not in key_text:
        holds = "a certificate" if _CERT in key_text else "no PEM private key"
        raise InvalidInput(f"--tls-key {str(key)!r} holds {holds}, not a private key "
                           "(-----BEGIN PRIVATE KEY----- ..., PKCS#8)")
    if _ENCRYPTED in key_text:
        raise InvalidInput(f"--tls-key {str(key)!r} is encrypted: give the key without a "
                           "passphrase (openssl pkcs8 -topk8 -nocrypt)")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e) or "key values mismatch" in str(e):
            raise InvalidInput(f"--tls-key {str(key)!r} is not the key of the certificate in "
                               f"--tls-cert {str(cert)!r}") from None
        raise InvalidInput(f"--tls-cert {str(cert)!r} with --tls-key {str(key)!r} cannot be "
                           f"used: {e.reason or e}") from None


def _read(path: Path, option: str) -> str:
    try:
        return path.read_bytes().decode("latin-1")
    except FileNotFoundError:
        raise InvalidInput(f"{option} {str(path)!r} does not exist") from None
    except OSError as e:
        raise InvalidInput(f"{option} {str(path)!r} cannot be read: {e.strerror}") from None
