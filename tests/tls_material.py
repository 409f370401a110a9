"""A throwaway certificate authority for the TLS tests: a CA, a server certificate for
127.0.0.1/localhost and client certificates, made fresh by each test run (no key is ever
committed)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(**attributes: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "O": NameOID.ORGANIZATION_NAME, "C": NameOID.COUNTRY_NAME}
    # Most general first, as in the certificate; the DN string reads the other way round.
    order = ["C", "O", "OU", "CN"]
    return x509.Name([x509.NameAttribute(oids[key], attributes[key])
                      for key in order if key in attributes])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class Pki:
    directory: Path
    ca_key: ec.EllipticCurvePrivateKey
    ca_cert: x509.Certificate

    @classmethod
    def create(cls, directory: Path, name: str = "test CA") -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(CN=name, O="rebalanced tests")
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        pki = cls(directory, key, cert)
        (directory / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pki

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    def issue(self, file_stem: str, *, server: bool = False, **subject: str) -> Path:
        """A key and certificate signed by this CA, written as one PEM file (key first, as
        Kafka's PEM keystore has it) and as `<stem>.key` / `<stem>.crt`; returns the PEM."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(**subject))
                   .issuer_name(self.ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        (self.directory / f"{file_stem}.key").write_bytes(_pem_key(key))
        (self.directory / f"{file_stem}.crt").write_bytes(cert_pem)
        both = self.directory / f"{file_stem}.pem"
        both.write_bytes(_pem_key(key) + cert_pem)
        return both
