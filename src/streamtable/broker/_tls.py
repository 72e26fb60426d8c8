"""TLS material for an :class:`~streamtable.broker.EmbeddedKafka` SSL listener.

A throw-away certificate authority signs the broker's certificate (for ``127.0.0.1`` and
``localhost``) and one client certificate; everything is made by the JDK's ``keytool`` (the
JDK that runs the broker), as PKCS#12 files, which both Java and librdkafka read, plus the CA
as PEM for librdkafka's ``ssl.ca.location``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
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
        f"keytool not found beside {java_executable()} nor on PATH: EmbeddedKafka(tls=True) "
        "makes its certificates with the JDK's keytool; install a full JDK (not only a JRE)"
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
        """``server.properties`` settings of the SSL listener (client certificates required)."""
        return {
            "ssl.keystore.location": str(self.broker_keystore),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": self.password,
            "ssl.key.password": self.password,
            "ssl.truststore.location": str(self.truststore),
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": self.password,
            "ssl.client.auth": "required",
        }

    def client_settings(self) -> dict[str, str]:
        """Client settings for both Kafka clients: Java's and librdkafka's names side by side."""
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca_pem),  # librdkafka
            "ssl.truststore.location": str(self.truststore),  # Java
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": self.password,
            "ssl.keystore.location": str(self.client_keystore),  # both
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": self.password,
        }


def _keytool(*args: str) -> None:
    done = subprocess.run(
        [keytool_executable(), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise EnvironmentSetupError(
            f"keytool {args[0]} failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}"
        )


def _keystore(folder: Path, name: str, password: str, ca: Path, ca_pem: Path, san: str) -> Path:
    """A PKCS#12 keystore with ``name``'s key and its certificate signed by the CA."""
    store = folder / f"{name}.p12"
    common = ("-storetype", "PKCS12", "-storepass", password)
    _keytool(
        "-genkeypair", "-alias", name, "-keyalg", "RSA", "-keysize", "2048",
        "-dname", f"CN={name}", "-validity", _VALIDITY_DAYS, "-keystore", str(store),
        "-keypass", password, *common,
    )  # fmt: skip
    request, signed = folder / f"{name}.csr", folder / f"{name}.pem"
    _keytool("-certreq", "-alias", name, "-keystore", str(store), "-file", str(request), *common)
    extensions: Sequence[str] = ("-ext", f"SAN={san}") if san else ()
    _keytool(
        "-gencert", "-alias", "ca", "-keystore", str(ca), "-infile", str(request),
        "-outfile", str(signed), "-rfc", "-validity", _VALIDITY_DAYS, *extensions, *common,
    )  # fmt: skip
    # the chain: the CA first (so that keytool can link the reply to it), then the reply
    _keytool("-importcert", "-alias", "ca", "-file", str(ca_pem), "-keystore", str(store),
             "-noprompt", *common)  # fmt: skip
    _keytool("-importcert", "-alias", name, "-file", str(signed), "-keystore", str(store),
             *common)  # fmt: skip
    return store


def make_tls_material(folder: Path) -> TlsMaterial:
    """Make a CA, a truststore, and broker and client keystores under ``folder``.

    Takes a few seconds: each step is a ``keytool`` JVM (the broker's and the client's chains
    are made in parallel).

    Raises
    ------
    EnvironmentSetupError
        If ``keytool`` is missing or fails (its message is included).
    """
    folder.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(12)
    common = ("-storetype", "PKCS12", "-storepass", password)
    ca, ca_pem, truststore = folder / "ca.p12", folder / "ca.pem", folder / "truststore.p12"
    _keytool(
        "-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048",
        "-dname", "CN=streamtable-embedded-kafka-ca", "-ext", "bc:c",
        "-validity", _VALIDITY_DAYS, "-keystore", str(ca), "-keypass", password, *common,
    )  # fmt: skip
    _keytool("-exportcert", "-alias", "ca", "-keystore", str(ca), "-rfc", "-file", str(ca_pem),
             *common)  # fmt: skip
    with ThreadPoolExecutor(3) as pool:
        trust = pool.submit(
            _keytool, "-importcert", "-alias", "ca", "-file", str(ca_pem),
            "-keystore", str(truststore), "-noprompt", *common,
        )  # fmt: skip
        broker = pool.submit(
            _keystore, folder, "broker", password, ca, ca_pem, "ip:127.0.0.1,dns:localhost"
        )
        client = pool.submit(_keystore, folder, "client", password, ca, ca_pem, "")
        trust.result()
        return TlsMaterial(password, ca_pem, truststore, broker.result(), client.result())
