//! The operator's API client: kube's middleware over a connector that offers HTTP/2.
//!
//! kube's own client speaks HTTP/1.1 only, so each watch holds a TCP and TLS connection of its own and
//! every watch event is read, decrypted and handed over on its own connection task. Offering `h2` in
//! ALPN lets the API server multiplex every watch and request over one connection, as client-go does.
//! A server or proxy that answers `http/1.1` still gets HTTP/1.1: the pool follows what was negotiated.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{ClientBuilder, ConfigExt, DynBody};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// How often an idle HTTP/2 connection is pinged, and how long a ping may go unanswered before the
/// connection is dropped. One dead connection would otherwise stall every watch at once; client-go
/// uses 30 s and 15 s for the same reason.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Which HTTP versions the client offers the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocols {
    /// HTTP/2 when the server agrees to it in ALPN, HTTP/1.1 otherwise.
    Http2OrHttp1,
    /// HTTP/1.1 only: one connection per watch, kube's default.
    Http1,
}

/// A client for `config` that offers `protocols`; otherwise kube's default stack (base URI, retries
/// of 429/503/504, authentication, impersonation headers).
pub fn build(config: Config, protocols: Protocols) -> Result<Client, kube::Error> {
    // An exec plugin's client certificate expires, and only kube's own builder can tell the client
    // when (its `valid_until` is crate-private); such a config keeps kube's stack.
    if protocols == Protocols::Http1 || config.auth_info.exec.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    // Many small frames (headers, window updates, pings) share one connection: without TCP_NODELAY,
    // Nagle's algorithm holds each behind the peer's delayed ACK, about 40 ms a request.
    http.set_nodelay(true);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            name.clone()
                .try_into()
                .map_err(|e| kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e)))?,
        )),
        None => builder,
    };
    let connector = builder.enable_all_versions().wrap_connector(http);
    let hyper_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_EVERY)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper_client)
        .map_response(|response| response.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>));
    Ok(ClientBuilder::new(service, config.default_namespace.clone()).build())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::*;

    /// Accepts one TLS connection offering both versions and returns the protocol the client chose.
    async fn negotiated(protocols: Protocols) -> Option<Vec<u8>> {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
        let key = rustls_pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let mut server =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_no_client_auth()
                .with_single_cert(vec![cert.cert.der().clone()], key)
                .expect("a server config");
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("an address").port();
        let accepted = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("a connection");
            let tls = TlsAcceptor::from(Arc::new(server))
                .accept(tcp)
                .await
                .expect("a handshake");
            tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
        });

        let mut config = Config::new(format!("https://127.0.0.1:{port}").parse().expect("a URL"));
        config.root_cert = Some(vec![cert.cert.der().to_vec()]);
        config.tls_server_name = Some("localhost".to_owned());
        let client = build(config, protocols).expect("a client");
        // The server hangs up after the handshake; only the negotiation matters here.
        let _ = client.apiserver_version().await;
        accepted.await.expect("the server task")
    }

    #[tokio::test]
    async fn the_client_takes_http2_when_the_server_offers_it() {
        assert_eq!(
            negotiated(Protocols::Http2OrHttp1).await.as_deref(),
            Some(&b"h2"[..])
        );
    }

    #[tokio::test]
    async fn with_http2_off_the_client_offers_no_protocol_and_so_speaks_http1() {
        // kube's own connector offers nothing in ALPN: without a protocol agreed, TLS carries HTTP/1.1.
        assert_eq!(negotiated(Protocols::Http1).await, None);
    }
}
