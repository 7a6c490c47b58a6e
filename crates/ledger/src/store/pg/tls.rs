//! The TLS a PostgreSQL connection uses, as its `sslmode` asks: `prefer`/`require` encrypt
//! without verifying the server's certificate (libpq's meaning of those modes);
//! `verify-ca` checks that a trusted authority signed it, and `verify-full` that it was also
//! issued for the host connected to. The trusted authorities are `sslrootcert`: a PEM file, or
//! `system` for the system's store (libpq-connect, "sslrootcert"; its default is
//! `~/.postgresql/root.crt`).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::error::{LedgerError, Result};

/// How far the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// `verify-ca`: signed by a trusted authority, for whatever host.
    Authority,
    /// `verify-full`: that, and issued for the host connected to.
    Full,
}

/// Where the trusted authorities come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Roots {
    /// A PEM file of certificates.
    File(PathBuf),
    /// The system's store (`sslrootcert=system`).
    System,
}

/// What `verify-ca`/`verify-full` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verify {
    pub(crate) check: Check,
    pub(crate) roots: Roots,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The connector for `verify` (`None`: encrypted, unverified). An unreadable or empty root
/// file is an error naming `sslrootcert`.
pub(crate) fn connector(
    verify: Option<&Verify>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| LedgerError::Invalid(format!("TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        None => Arc::new(Unverified(provider)),
        Some(verify) => {
            let roots = root_store(&verify.roots)?;
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| LedgerError::Invalid(format!("ledger.url: sslrootcert: {e}")))?;
            match verify.check {
                Check::Full => webpki,
                Check::Authority => Arc::new(AnyName(webpki)),
            }
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

fn root_store(roots: &Roots) -> Result<rustls::RootCertStore> {
    let invalid = |why: String| LedgerError::Invalid(format!("ledger.url: sslrootcert {why}"));
    let certs: Vec<CertificateDer<'static>> = match roots {
        Roots::File(path) => {
            let shown = path.display();
            let read = CertificateDer::pem_file_iter(path)
                .map_err(|e| invalid(format!("{shown}: cannot read it ({e})")))?;
            read.collect::<std::result::Result<_, _>>()
                .map_err(|e| invalid(format!("{shown}: not a PEM certificate file ({e})")))?
        }
        Roots::System => rustls_native_certs::load_native_certs().certs,
    };
    let mut store = rustls::RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        let what = match roots {
            Roots::File(path) => path.display().to_string(),
            Roots::System => "system".to_owned(),
        };
        return Err(invalid(format!("{what}: no certificate in it")));
    }
    Ok(store)
}

/// `verify-ca`: the chain to a trusted authority is checked, the name it was issued for is not.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any server certificate (as libpq's `sslmode=require` does) while still checking the
/// handshake's signatures.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
