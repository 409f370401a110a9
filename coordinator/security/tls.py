"""TLS for SSL and SASL_SSL listeners under Kafka's setting names, and the principal of a client
certificate (`ssl.principal.mapping.rules`).

Kafka's keystores are Java's; here a keystore is `PEM` (a file holding the private key and the
certificate chain, or the two inline as `ssl.keystore.key` and `ssl.keystore.certificate.chain`)
or `PKCS12`. A JKS keystore is refused at start-up with the command that converts it.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.settings import ConfigError

# Java's names of TLS versions (ssl.enabled.protocols) -> Python's.
_TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_JKS_ADVICE = ("convert it to PKCS12 (keytool -importkeystore -srckeystore FILE.jks "
               "-destkeystore FILE.p12 -deststoretype PKCS12) or to PEM")

Lookup = Callable[[str], str]


def server_context(listener: str, get: Lookup) -> ssl.SSLContext:
    """The server-side TLS context of `listener`, from its settings (`get(key)` answers the
    listener's `listener.name.<name>.<key>`, else the broker-wide `<key>`, else "")."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # As Kafka: a TLS 1.2 client asking to renegotiate is refused (TLS 1.3 has none).
    context.options |= ssl.OP_NO_RENEGOTIATION
    _set_versions(context, listener, get("ssl.enabled.protocols"))
    ciphers = get("ssl.cipher.suites").strip()
    if ciphers:
        try:
            context.set_ciphers(":".join(c.strip() for c in ciphers.split(",") if c.strip()))
        except ssl.SSLError as exc:
            raise ConfigError(f"listener {listener}: ssl.cipher.suites {ciphers!r} names no "
                              f"cipher OpenSSL knows (give OpenSSL's names): {exc}") from None
    _load_keystore(context, listener, get)
    client_auth = get("ssl.client.auth").strip().lower() or "none"
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"listener {listener}: ssl.client.auth must be none, requested or "
                          f"required, not {client_auth!r}")
    if client_auth != "none":
        if not _load_truststore(context, listener, get):
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        context.verify_mode = _CLIENT_AUTH[client_auth]
    return context


def _set_versions(context: ssl.SSLContext, listener: str, text: str) -> None:
    names = [name.strip() for name in (text or "TLSv1.2,TLSv1.3").split(",") if name.strip()]
    unknown = [name for name in names if name not in _TLS_VERSIONS]
    if unknown or not names:
        raise ConfigError(f"listener {listener}: ssl.enabled.protocols {text!r}: only TLSv1.2 "
                          "and TLSv1.3 are served")
    versions = sorted(_TLS_VERSIONS[name] for name in names)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _read(listener: str, key: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise ConfigError(f"listener {listener}: cannot read {key} {location}: "
                          f"{exc.strerror}") from None


def _load_keystore(context: ssl.SSLContext, listener: str, get: Lookup) -> None:
    kind = (get("ssl.keystore.type") or "PEM").strip().upper()
    location = get("ssl.keystore.location").strip()
    key_password = get("ssl.key.password") or get("ssl.keystore.password") or None
    inline_key = get("ssl.keystore.key").strip()
    inline_chain = get("ssl.keystore.certificate.chain").strip()
    if kind == "JKS":
        raise ConfigError(f"listener {listener}: ssl.keystore.type JKS is not readable here: "
                          f"{_JKS_ADVICE}")
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"listener {listener}: ssl.keystore.type must be PEM or PKCS12")
    if kind == "PKCS12":
        if not location:
            raise ConfigError(f"listener {listener}: ssl.keystore.location is required for "
                              "a PKCS12 keystore")
        pem = _pkcs12_to_pem(listener, _read(listener, "ssl.keystore.location", location),
                             get("ssl.keystore.password"))
        _load_pem_chain(context, listener, pem, None)
        return
    if inline_key or inline_chain:
        if not (inline_key and inline_chain):
            raise ConfigError(f"listener {listener}: ssl.keystore.key and "
                              "ssl.keystore.certificate.chain are given together")
        pem = (inline_key + "\n" + inline_chain + "\n").encode()
        _load_pem_chain(context, listener, pem, key_password)
        return
    if not location:
        raise ConfigError(f"listener {listener}: a TLS listener needs its key and certificate "
                          "(ssl.keystore.location, or ssl.keystore.key with "
                          "ssl.keystore.certificate.chain)")
    _load_pem_chain(context, listener, _read(listener, "ssl.keystore.location", location),
                    key_password)


def _load_pem_chain(context: ssl.SSLContext, listener: str, pem: bytes,
                    password: str | None) -> None:
    # `load_cert_chain` reads only files: the key goes through a file readable by this user
    # alone, removed at once.
    fd, name = tempfile.mkstemp(prefix="keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        context.load_cert_chain(name, password=password)
    except ssl.SSLError as exc:
        raise ConfigError(f"listener {listener}: the keystore's key and certificate do not "
                          f"load (wrong ssl.key.password, or not a key and its chain): "
                          f"{exc.reason or exc}") from None
    finally:
        os.unlink(name)


def _pkcs12_to_pem(listener: str, data: bytes, password: str) -> bytes:
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise ConfigError(f"listener {listener}: a PKCS12 keystore needs the `cryptography` "
                          "package; or give a PEM keystore") from None
    try:
        key, certificate, chain = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None)
    except ValueError:
        raise ConfigError(f"listener {listener}: the PKCS12 keystore does not open "
                          "(ssl.keystore.password)") from None
    if key is None or certificate is None:
        raise ConfigError(f"listener {listener}: the PKCS12 keystore holds no key and "
                          "certificate")
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    for cert in (certificate, *(chain or ())):
        pem += cert.public_bytes(Encoding.PEM)
    return pem


def _load_truststore(context: ssl.SSLContext, listener: str, get: Lookup) -> bool:
    """Load the CAs client certificates are checked against; False if none is configured."""
    kind = (get("ssl.truststore.type") or "PEM").strip().upper()
    location = get("ssl.truststore.location").strip()
    inline = get("ssl.truststore.certificates").strip()
    if kind == "JKS":
        raise ConfigError(f"listener {listener}: ssl.truststore.type JKS is not readable "
                          f"here: {_JKS_ADVICE}")
    try:
        if inline:
            context.load_verify_locations(cadata=inline)
            return True
        if not location:
            return False
        data = _read(listener, "ssl.truststore.location", location)
        if kind == "PKCS12":
            context.load_verify_locations(cadata=_pkcs12_certificates(
                listener, data, get("ssl.truststore.password")))
        else:
            context.load_verify_locations(cadata=data.decode("ascii", "replace"))
    except ssl.SSLError as exc:
        raise ConfigError(f"listener {listener}: the truststore holds no readable CA "
                          f"certificate: {exc.reason or exc}") from None
    return True


def _pkcs12_certificates(listener: str, data: bytes, password: str) -> str:
    try:
        from cryptography.hazmat.primitives.serialization import Encoding, pkcs12
    except ImportError:
        raise ConfigError(f"listener {listener}: a PKCS12 truststore needs the "
                          "`cryptography` package; or give a PEM truststore") from None
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise ConfigError(f"listener {listener}: the PKCS12 truststore does not open "
                          "(ssl.truststore.password)") from None
    certificates = [*([store.cert] if store.cert else []), *store.additional_certs]
    return "".join(c.certificate.public_bytes(Encoding.PEM).decode() for c in certificates)


# The certificate subject as Java's X500Principal.getName() writes it (RFC 2253), which is what
# Kafka's principal mapping rules are written against.
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
_EMAIL_OID = "1.2.840.113549.1.9.1"


def _escape_rfc2253(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def subject_dn(certificate: dict[str, Any]) -> str:
    """`CN=alice,OU=eng,O=Acme,C=US` from `SSLObject.getpeercert()`'s subject."""
    rdns = []
    for rdn in reversed(certificate.get("subject", ())):
        parts = []
        for name, value in rdn:
            keyword = _RFC2253_KEYWORDS.get(name)
            if keyword is not None:
                parts.append(f"{keyword}={_escape_rfc2253(value)}")
            elif name == "emailAddress" and len(value) < 128:
                # Java has no keyword for it: the OID and the DER IA5String in hex.
                encoded = bytes([0x16, len(value)]) + value.encode("ascii", "replace")
                parts.append(f"{_EMAIL_OID}=#{encoded.hex()}")
            else:
                parts.append(f"{name}={_escape_rfc2253(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


class NoMatchingRule(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))"
                   r"\s*(?:,|\n|\Z)")


def _java_replacement(text: str) -> str:
    """Java's `$1` and `\\x` in a replacement -> Python's `\\g<1>` and the literal x."""
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
        elif char == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append(char.replace("\\", "\\\\"))
            i += 1
    return "".join(out)


class PrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule whose pattern matches the whole subject DN
    gives the principal name (`$n` are its groups, `/L` or `/U` change the case); DEFAULT is
    the DN itself. No rule matching fails the client's authentication."""

    def __init__(self, rules: str) -> None:
        self.rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        position = 0
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match.end() == position:
                raise ConfigError(f"ssl.principal.mapping.rules: cannot read the rule at "
                                  f"{text[position:position + 40]!r}")
            position = match.end()
            if match.group(1):
                self.rules.append(_Rule(None, "", ""))
                continue
            try:
                pattern = re.compile(match.group(2))
            except re.error as exc:
                raise ConfigError(f"ssl.principal.mapping.rules: {match.group(2)!r} is not a "
                                  f"regular expression: {exc}") from None
            self.rules.append(_Rule(pattern, _java_replacement(match.group(3)),
                                    match.group(4)))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule.pattern is None:
                return dn
            match = rule.pattern.fullmatch(dn)
            if match is None:
                continue
            result = match.expand(rule.replacement)
            if rule.case == "L":
                return result.lower()
            if rule.case == "U":
                return result.upper()
            return result
        raise NoMatchingRule(f"no rule of ssl.principal.mapping.rules matches {dn!r}")
