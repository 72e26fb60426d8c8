"""The secured listener of an :class:`~streamtable.broker.EmbeddedKafka`: TLS material, SASL.

For TLS, a throw-away certificate authority signs the broker's certificate (for ``127.0.0.1``
and ``localhost``) and one client certificate; everything is made by the JDK's ``keytool`` (the
JDK that runs the broker), as PKCS#12 files, which both Java and librdkafka read, plus the CA
as PEM for librdkafka's ``ssl.ca.location``. SASL uses the ``PLAIN`` mechanism with the users
the cluster is given.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from streamtable.errors import EnvironmentSetupError
from streamtable.runtime.jars import java_executable

#: validity of the generated certificates, in days (the material lives as long as the broker)
_VALIDITY_DAYS = "30"


def keytool_executable() -> str:
    """The ``keytool`` next to the ``java`` that runs the broker (else the one on ``PATH``).

    Raises
    ------
    EnvironmentSetupError
        If neither exists (a JRE without the JDK tools).
    """
    beside = Path(os.path.realpath(java_executable())).with_name("keytool")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("keytool")
    if found:
        return found
    raise EnvironmentSetupError(
        f"keytool not found beside {java_executable()} nor on PATH: "
        "EmbeddedKafka(security_protocol=...) makes its certificates with the JDK's keytool; "
        "install a full JDK (not only a JRE)"
    )


@dataclass(frozen=True)
class TlsMaterial:
    """The files of a test CA, the broker's key and a client's key (PKCS#12, one password).

    Attributes
    ----------
    password : str
        Password of every keystore and truststore (random per broker).
    ca_pem : pathlib.Path
        The CA certificate (PEM): librdkafka's ``ssl.ca.location``.
    truststore : pathlib.Path
        The CA certificate in a PKCS#12 truststore: Java's ``ssl.truststore.location``.
    broker_keystore, client_keystore : pathlib.Path
        Each holds its key and its certificate chain (signed by the CA).
    """

    password: str
    ca_pem: Path
    truststore: Path
    broker_keystore: Path
    client_keystore: Path

    def broker_settings(self) -> dict[str, str]:
        """``server.properties`` settings of the listener's keys and trusted CA."""
        return {
            "ssl.keystore.location": str(self.broker_keystore),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": self.password,
            "ssl.key.password": self.password,
            "ssl.truststore.location": str(self.truststore),
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": self.password,
        }

    def client_settings(self) -> dict[str, str]:
        """``ssl.*`` client settings, Java's and librdkafka's names side by side."""
        return {
            "ssl.ca.location": str(self.ca_pem),  # librdkafka
            "ssl.truststore.location": str(self.truststore),  # Java
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": self.password,
            "ssl.keystore.location": str(self.client_keystore),  # both
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": self.password,
        }


#: PKCS#12 protection that OpenSSL 3 (librdkafka) reads: JDK 17's default, stated for older JDKs
_PKCS12_ALGORITHMS = (
    "-J-Dkeystore.pkcs12.certProtectionAlgorithm=PBEWithHmacSHA256AndAES_256",
    "-J-Dkeystore.pkcs12.keyProtectionAlgorithm=PBEWithHmacSHA256AndAES_256",
    "-J-Dkeystore.pkcs12.macAlgorithm=HmacPBESHA256",
)


def _keytool(password: str, *args: str) -> None:
    """Run ``keytool`` with ``args``; passwords come from the environment (``:env``), not argv."""
    done = subprocess.run(
        [keytool_executable(), *_PKCS12_ALGORITHMS, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "STREAMTABLE_KEYTOOL_PASSWORD": password},
    )
    if done.returncode != 0:
        raise EnvironmentSetupError(
            f"keytool {args[0]} failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}"
        )


#: keytool's options for the store password and the key password, read from the environment
_PASSWORDS = (
    "-storetype", "PKCS12",
    "-storepass:env", "STREAMTABLE_KEYTOOL_PASSWORD",
)  # fmt: skip
_KEY_PASSWORD = ("-keypass:env", "STREAMTABLE_KEYTOOL_PASSWORD")


def _keystore(folder: Path, name: str, password: str, ca: Path, ca_pem: Path, san: str) -> Path:
    """A PKCS#12 keystore with ``name``'s key and its certificate signed by the CA."""
    store = folder / f"{name}.p12"
    _keytool(
        password, "-genkeypair", "-alias", name, "-keyalg", "RSA", "-keysize", "2048",
        "-dname", f"CN={name}", "-validity", _VALIDITY_DAYS, "-keystore", str(store),
        *_KEY_PASSWORD, *_PASSWORDS,
    )  # fmt: skip
    request, signed = folder / f"{name}.csr", folder / f"{name}.pem"
    _keytool(password, "-certreq", "-alias", name, "-keystore", str(store),
             "-file", str(request), *_PASSWORDS)  # fmt: skip
    extensions: Sequence[str] = ("-ext", f"SAN={san}") if san else ()
    _keytool(
        password, "-gencert", "-alias", "ca", "-keystore", str(ca), "-infile", str(request),
        "-outfile", str(signed), "-rfc", "-validity", _VALIDITY_DAYS, *extensions, *_PASSWORDS,
    )  # fmt: skip
    # the chain: the CA first (so that keytool can link the reply to it), then the reply
    _keytool(password, "-importcert", "-alias", "ca", "-file", str(ca_pem),
             "-keystore", str(store), "-noprompt", *_PASSWORDS)  # fmt: skip
    _keytool(password, "-importcert", "-alias", name, "-file", str(signed),
             "-keystore", str(store), *_PASSWORDS)  # fmt: skip
    return store


def make_tls_material(folder: Path) -> TlsMaterial:
    """Make a CA, a truststore, and broker and client keystores in a new ``folder``.

    Takes about 10 s: each step is a ``keytool`` JVM (the broker's and the client's chains
    are made in parallel). What ``folder`` held before is deleted.

    Raises
    ------
    EnvironmentSetupError
        If ``keytool`` is missing or fails (its message is included).
    """
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    password = secrets.token_hex(12)
    ca, ca_pem, truststore = folder / "ca.p12", folder / "ca.pem", folder / "truststore.p12"
    _keytool(
        password, "-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048",
        "-dname", "CN=streamtable-embedded-kafka-ca", "-ext", "bc:c",
        "-validity", _VALIDITY_DAYS, "-keystore", str(ca), *_KEY_PASSWORD, *_PASSWORDS,
    )  # fmt: skip
    _keytool(password, "-exportcert", "-alias", "ca", "-keystore", str(ca), "-rfc",
             "-file", str(ca_pem), *_PASSWORDS)  # fmt: skip
    with ThreadPoolExecutor(3) as pool:
        trust = pool.submit(
            _keytool, password, "-importcert", "-alias", "ca", "-file", str(ca_pem),
            "-keystore", str(truststore), "-noprompt", *_PASSWORDS,
        )  # fmt: skip
        broker = pool.submit(
            _keystore, folder, "broker", password, ca, ca_pem, "ip:127.0.0.1,dns:localhost"
        )
        client = pool.submit(_keystore, folder, "client", password, ca, ca_pem, "")
        trust.result()
        return TlsMaterial(password, ca_pem, truststore, broker.result(), client.result())


#: the protocols a secured listener may use (``PLAINTEXT`` is always there besides it)
SECURE_PROTOCOLS = ("SSL", "SASL_SSL", "SASL_PLAINTEXT")


_SASL_USER = re.compile(r"[A-Za-z0-9_.-]+")


def check_sasl_users(users: Mapping[str, str]) -> None:
    """Refuse users a JAAS line of ``PlainLoginModule`` options cannot hold.

    Raises
    ------
    ValueError
        If there is no user, a name is not made of letters, digits, ``_``, ``.`` and ``-``, or
        a password is empty or holds a double quote, a backslash or a line break.
    """
    if not users:
        raise ValueError("sasl_users is empty: give at least one user and password")
    for name, password in users.items():
        if not isinstance(name, str) or not _SASL_USER.fullmatch(name):
            raise ValueError(f"SASL user name {name!r}: use letters, digits, '_', '.' and '-' only")
        if not isinstance(password, str) or not password or any(c in password for c in '"\\\n\r'):
            raise ValueError(
                f"The password of SASL user {name!r} must be a non-empty string without '\"', "
                "'\\' or line breaks"
            )


def _plain_login(**options: str) -> str:
    """A JAAS line of Kafka's ``PlainLoginModule`` (Java's ``sasl.jaas.config``)."""
    pairs = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {pairs};"


@dataclass(frozen=True)
class ListenerSecurity:
    """How the secured listener authenticates and encrypts.

    Attributes
    ----------
    protocol : {"SSL", "SASL_SSL", "SASL_PLAINTEXT"}
        The listener's ``security.protocol`` (also its listener name).
    users : Mapping[str, str]
        SASL/PLAIN users and passwords (empty for ``SSL``, which asks for a client certificate
        instead).
    tls : TlsMaterial, optional
        The keys and certificates (for ``SSL`` and ``SASL_SSL``).
    """

    protocol: str
    users: Mapping[str, str]
    tls: TlsMaterial | None

    def broker_settings(self) -> dict[str, str]:
        """``server.properties`` settings of the listener."""
        settings: dict[str, str] = {}
        if self.tls is not None:
            settings.update(self.tls.broker_settings())
            if self.protocol == "SSL":  # the certificate authenticates the client
                settings["ssl.client.auth"] = "required"
        if self.protocol.startswith("SASL"):
            users = {f"user_{name}": password for name, password in self.users.items()}
            settings["sasl.enabled.mechanisms"] = "PLAIN"
            settings[f"listener.name.{self.protocol.lower()}.plain.sasl.jaas.config"] = (
                _plain_login(**users)
            )
        return settings

    def client_settings(self, user: str | None = None) -> dict[str, str]:
        """A client's settings: Java's and librdkafka's keys side by side where they differ."""
        settings = {"security.protocol": self.protocol}
        if self.tls is not None:  # the client certificate too, asked for or not
            settings.update(self.tls.client_settings())
        if self.protocol.startswith("SASL"):
            name = user if user is not None else next(iter(self.users))
            if name not in self.users:
                raise KeyError(f"no SASL user {name!r}: the cluster has {sorted(self.users)}")
            password = self.users[name]
            settings.update(
                {
                    "sasl.mechanism": "PLAIN",
                    "sasl.jaas.config": _plain_login(username=name, password=password),  # Java
                    "sasl.username": name,  # librdkafka
                    "sasl.password": password,
                }
            )
        return settings
