//! A client connection's request side and its upstream: admitting a new session (with the
//! `delegated` policy, its upstream token), opening the upstream connection on the first
//! forwarded request (as the identity the request was routed with), and queueing each forwarded
//! request on it behind its entry in the response queue.

use portcullis::connection::Forwarded;
use portcullis::forwarding::UpstreamIdentity;

use super::brokers::Target;
use super::client::Driver;
use super::driver_error::DriverError;
use super::queue::Pending;
use super::upstream::{UpstreamConnection, UpstreamError};

impl Driver {
    /// Sends every frame queued for the upstream.
    pub(super) async fn flush_upstream(&mut self) -> Result<(), DriverError> {
        let Some(upstream) = self.upstream.as_mut() else {
            return Ok(());
        };
        match upstream.flush().await {
            Ok(()) => Ok(()),
            Err(source) => Err(self.upstream_error(source)),
        }
    }

    /// Does what a new session needs before the client is told it authenticated: with the
    /// `delegated` policy, obtains the principal's upstream token (see
    /// [`super::delegated::DelegatedUpstream::admit`]). `Err` is the message the failed
    /// authentication carries to the client.
    pub(super) async fn admit(
        &mut self,
        principal: &portcullis::principal::Principal,
    ) -> Result<(), portcullis::connection::AdmissionRefused> {
        let Some(delegated) = self.shared.delegated.as_ref() else {
            return Ok(());
        };
        match delegated.admit(principal, &self.shared.upstream).await {
            Ok(Some(admitted)) => {
                self.admitted_settings = Some(admitted.settings);
                self.upstream_lease = Some(admitted.lease);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                match e {
                    // The operator's side of a refusal (the missing ACL and the command that grants
                    // it) was logged at WARN where the upstream refused.
                    super::delegated_error::DelegatedError::Refused { .. } => {
                        tracing::debug!(peer = %self.peer, principal = %principal, error = %e, "session refused");
                    }
                    _ => {
                        tracing::warn!(peer = %self.peer, principal = %principal, error = %e, "cannot obtain the client's upstream token; its authentication fails");
                    }
                }
                Err(portcullis::connection::AdmissionRefused::new(
                    e.client_message(),
                ))
            }
        }
    }

    /// Queues one client frame for the upstream (sent by [`Driver::flush_upstream`]); its entry
    /// goes into the response queue first, so its answer always finds it.
    pub(super) async fn forward(&mut self, request: Forwarded) -> Result<(), DriverError> {
        // Opening the upstream and re-authenticating it happen once per connection or session,
        // and their futures are large (TLS, SASL): boxed, so that the connection's task (sized
        // for its largest state, for its whole life) stays small while it waits.
        if self.upstream.is_none() {
            Box::pin(self.open_upstream(&request.identity)).await?;
        } else {
            self.check_identity(&request.identity)?;
        }
        let Some(upstream) = self.upstream.as_mut() else {
            return Err(self.upstream_error(UpstreamError::Closed));
        };
        if upstream.reauthentication_due() {
            if let Err(source) = Box::pin(upstream.reauthenticate_if_due(&self.queue)).await {
                return Err(self.upstream_error(source));
            }
        }
        let Some(upstream) = self.upstream.as_mut() else {
            return Err(self.upstream_error(UpstreamError::Closed));
        };
        if request.expects_response {
            self.queue.push_pending(Pending {
                plan: request.plan,
                api_key: request.api_key,
                api_version: request.api_version,
                correlation_id: request.correlation_id,
                upstream_call: crate::telemetry::traces::UpstreamCall::start(
                    &self.request_span,
                    request.api_key,
                    Some(upstream.address()),
                ),
            });
        }
        if let Err(source) = upstream.send(request.frame) {
            return Err(self.upstream_error(source));
        }
        Ok(())
    }

    /// Opens the connection's upstream on the first forwarded request, and hands its read half
    /// to the response side.
    async fn open_upstream(
        &mut self,
        identity: &portcullis::forwarding::UpstreamIdentity,
    ) -> Result<(), DriverError> {
        if self.upstream.is_some() {
            return self.check_identity(identity);
        }
        // Who the connection acts as: the service login, or (delegated) the principal's token,
        // normally obtained when the session was admitted.
        let own_settings = match self.admitted_settings.take() {
            Some(settings) if *identity == UpstreamIdentity::Delegated => Some(settings),
            admitted => {
                self.admitted_settings = admitted;
                let (own_settings, lease) = super::delegated_hook::connection_settings(
                    self.shared.delegated.as_ref(),
                    &self.shared.upstream,
                    identity,
                    self.connection.session().map(|s| &s.principal),
                )
                .await?;
                if lease.is_some() {
                    self.upstream_lease = lease;
                }
                own_settings
            }
        };
        let settings = own_settings.as_ref().unwrap_or(&self.shared.upstream);
        let opened = match self.target {
            Target::Bootstrap => {
                UpstreamConnection::open_any(&settings.bootstrap_servers, settings).await
            }
            Target::Broker(node_id) => match self.shared.brokers.address(node_id) {
                Some(address) => UpstreamConnection::open(&address, settings, None)
                    .await
                    .map(|(c, _)| c),
                None => Err(UpstreamError::NoAddress(format!("broker {node_id}"))),
            },
        };
        let connection = opened.map_err(|source| DriverError::Upstream {
            address: self.target_name(),
            source,
        })?;
        tracing::debug!(target = ?self.target, upstream = connection.address(), "upstream connected");
        let (sender, reader) = connection.into_halves(settings.connect_timeout);
        self.queue.push_upstream(reader);
        self.upstream = Some(sender);
        self.upstream_identity = Some(identity.clone());
        Ok(())
    }

    /// Every request sent on the open upstream must have been routed with the identity it
    /// authenticated as.
    fn check_identity(
        &self,
        identity: &portcullis::forwarding::UpstreamIdentity,
    ) -> Result<(), DriverError> {
        match &self.upstream_identity {
            Some(opened) if opened != identity => Err(DriverError::IdentitySwitched {
                opened: opened.clone(),
                requested: identity.clone(),
            }),
            _ => Ok(()),
        }
    }

    fn upstream_error(&self, source: UpstreamError) -> DriverError {
        let address = match &self.upstream {
            Some(upstream) => upstream.address().to_owned(),
            None => self.target_name(),
        };
        DriverError::Upstream { address, source }
    }
}
