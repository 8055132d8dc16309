//! Each kind's function table, read from the plugin, checked (size, no null entry) and copied
//! into host-owned structs of plain function pointers.

use std::ffi::c_void;

use super::error::AbiError;
use super::{
    table_size, AclCallFn, AdmitsFn, AuthorizeByTypeFn, AuthorizeFn, AuthorizerTable,
    BuildPrincipalFn, ClientCompleteFn, ClientInitialFn, ClientStepFn, CreateFn, CredentialFn,
    EventSubscriberTable, ForwardingPolicyTable, FreeFn, HasAclAdminFn, LoginModuleTable,
    LoginStartFn, NameFn, OnEventFn, PluginKind, PrincipalBuilderTable, RouteFn,
    SaslMechanismTable, ScreensActionsFn, StartFn, StepFn,
};

/// A SASL mechanism's functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SaslFunctions {
    pub(crate) mechanism_name: NameFn,
    pub(crate) start: StartFn,
    pub(crate) step: StepFn,
    pub(crate) free_exchange: FreeFn,
}

/// An authorizer's functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AuthorizerFunctions {
    pub(crate) authorize: AuthorizeFn,
    pub(crate) authorize_by_resource_type: AuthorizeByTypeFn,
    pub(crate) has_acl_admin: HasAclAdminFn,
    pub(crate) create_acls: AclCallFn,
    pub(crate) delete_acls: AclCallFn,
    pub(crate) describe_acls: AclCallFn,
}

/// A principal builder's functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PrincipalFunctions {
    pub(crate) build: BuildPrincipalFn,
}

/// A login module's functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoginFunctions {
    pub(crate) mechanism: NameFn,
    pub(crate) credential: CredentialFn,
    pub(crate) refresh: CredentialFn,
    pub(crate) start: LoginStartFn,
    pub(crate) client_initial: ClientInitialFn,
    pub(crate) client_step: ClientStepFn,
    pub(crate) client_is_complete: ClientCompleteFn,
    pub(crate) free_client_exchange: FreeFn,
}

/// A forwarding policy's functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PolicyFunctions {
    pub(crate) name: NameFn,
    pub(crate) route: RouteFn,
    pub(crate) screens_actions: ScreensActionsFn,
    pub(crate) admits: AdmitsFn,
}

/// An event subscriber's functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EventFunctions {
    pub(crate) on_event: OnEventFn,
}

/// The checked functions of one export, by kind.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KindTable {
    SaslMechanism(CreateFn, SaslFunctions),
    Authorizer(CreateFn, AuthorizerFunctions),
    PrincipalBuilder(CreateFn, PrincipalFunctions),
    LoginModule(CreateFn, LoginFunctions),
    ForwardingPolicy(CreateFn, PolicyFunctions),
    EventSubscriber(CreateFn, EventFunctions),
}

impl KindTable {
    /// The kind.
    pub(crate) fn kind(&self) -> PluginKind {
        match self {
            KindTable::SaslMechanism(..) => PluginKind::SaslMechanism,
            KindTable::Authorizer(..) => PluginKind::Authorizer,
            KindTable::PrincipalBuilder(..) => PluginKind::PrincipalBuilder,
            KindTable::LoginModule(..) => PluginKind::LoginModule,
            KindTable::ForwardingPolicy(..) => PluginKind::ForwardingPolicy,
            KindTable::EventSubscriber(..) => PluginKind::EventSubscriber,
        }
    }

    /// The `create` function.
    pub(crate) fn create(&self) -> CreateFn {
        match self {
            KindTable::SaslMechanism(create, _)
            | KindTable::Authorizer(create, _)
            | KindTable::PrincipalBuilder(create, _)
            | KindTable::LoginModule(create, _)
            | KindTable::ForwardingPolicy(create, _)
            | KindTable::EventSubscriber(create, _) => *create,
        }
    }

    /// Checks and copies the table of a `kind` export named `plugin`.
    ///
    /// # Safety
    ///
    /// `table` is null or points to a table prefix of at least 4 bytes, and to `table_size`
    /// bytes laid out as the export macro writes the table of `kind`.
    pub(crate) unsafe fn read(
        kind: PluginKind,
        plugin: &str,
        table: *const c_void,
    ) -> Result<KindTable, AbiError> {
        let need = table_size(kind);
        let req = |f, name| required(plugin, f, name);
        Ok(match kind {
            PluginKind::SaslMechanism => {
                // SAFETY: forwarded from the caller, with the table type of `kind` (an integer and
                // `Option`s of function pointers: every bit pattern is valid).
                let t: SaslMechanismTable = unsafe { read_table(plugin, table, need) }?;
                KindTable::SaslMechanism(
                    req(t.create, "create")?,
                    SaslFunctions {
                        mechanism_name: required(plugin, t.mechanism_name, "mechanism_name")?,
                        start: required(plugin, t.start, "start")?,
                        step: required(plugin, t.step, "step")?,
                        free_exchange: required(plugin, t.free_exchange, "free_exchange")?,
                    },
                )
            }
            PluginKind::Authorizer => {
                // SAFETY: forwarded from the caller, with the table type of `kind` (an integer and
                // `Option`s of function pointers: every bit pattern is valid).
                let t: AuthorizerTable = unsafe { read_table(plugin, table, need) }?;
                KindTable::Authorizer(
                    req(t.create, "create")?,
                    AuthorizerFunctions {
                        authorize: required(plugin, t.authorize, "authorize")?,
                        authorize_by_resource_type: required(
                            plugin,
                            t.authorize_by_resource_type,
                            "authorize_by_resource_type",
                        )?,
                        has_acl_admin: required(plugin, t.has_acl_admin, "has_acl_admin")?,
                        create_acls: required(plugin, t.create_acls, "create_acls")?,
                        delete_acls: required(plugin, t.delete_acls, "delete_acls")?,
                        describe_acls: required(plugin, t.describe_acls, "describe_acls")?,
                    },
                )
            }
            PluginKind::PrincipalBuilder => {
                // SAFETY: forwarded from the caller, with the table type of `kind` (an integer and
                // `Option`s of function pointers: every bit pattern is valid).
                let t: PrincipalBuilderTable = unsafe { read_table(plugin, table, need) }?;
                KindTable::PrincipalBuilder(
                    req(t.create, "create")?,
                    PrincipalFunctions {
                        build: required(plugin, t.build, "build")?,
                    },
                )
            }
            PluginKind::LoginModule => {
                // SAFETY: forwarded from the caller, with the table type of `kind` (an integer and
                // `Option`s of function pointers: every bit pattern is valid).
                let t: LoginModuleTable = unsafe { read_table(plugin, table, need) }?;
                KindTable::LoginModule(
                    req(t.create, "create")?,
                    LoginFunctions {
                        mechanism: required(plugin, t.mechanism, "mechanism")?,
                        credential: required(plugin, t.credential, "credential")?,
                        refresh: required(plugin, t.refresh, "refresh")?,
                        start: required(plugin, t.start, "start")?,
                        client_initial: required(plugin, t.client_initial, "client_initial")?,
                        client_step: required(plugin, t.client_step, "client_step")?,
                        client_is_complete: required(
                            plugin,
                            t.client_is_complete,
                            "client_is_complete",
                        )?,
                        free_client_exchange: required(
                            plugin,
                            t.free_client_exchange,
                            "free_client_exchange",
                        )?,
                    },
                )
            }
            PluginKind::ForwardingPolicy => {
                // SAFETY: forwarded from the caller, with the table type of `kind` (an integer and
                // `Option`s of function pointers: every bit pattern is valid).
                let t: ForwardingPolicyTable = unsafe { read_table(plugin, table, need) }?;
                KindTable::ForwardingPolicy(
                    req(t.create, "create")?,
                    PolicyFunctions {
                        name: required(plugin, t.name, "name")?,
                        route: required(plugin, t.route, "route")?,
                        screens_actions: required(plugin, t.screens_actions, "screens_actions")?,
                        admits: required(plugin, t.admits, "admits")?,
                    },
                )
            }
            PluginKind::EventSubscriber => {
                // SAFETY: forwarded from the caller, with the table type of `kind` (an integer and
                // `Option`s of function pointers: every bit pattern is valid).
                let t: EventSubscriberTable = unsafe { read_table(plugin, table, need) }?;
                KindTable::EventSubscriber(
                    req(t.create, "create")?,
                    EventFunctions {
                        on_event: required(plugin, t.on_event, "on_event")?,
                    },
                )
            }
            // `PluginKind` is non-exhaustive; a kind the API knows and this framework does not
            // has no table here.
            #[allow(unreachable_patterns)]
            _ => {
                return Err(AbiError::UnknownKind {
                    index: 0,
                    name: plugin.to_owned(),
                    kind: kind.code(),
                })
            }
        })
    }
}

/// Reads a table's size prefix and the table itself, checking it is at least as long as `T`.
///
/// # Safety
///
/// `table` is null or points to a table prefix of at least 4 bytes, and to `table_size` bytes laid
/// out as a `T` (integers and `Option`s of function pointers: every bit pattern is valid).
pub(crate) unsafe fn read_table<T: Copy>(
    plugin: &str,
    table: *const c_void,
    needed: u32,
) -> Result<T, AbiError> {
    if table.is_null() {
        return Err(AbiError::MissingTable {
            plugin: plugin.to_owned(),
        });
    }
    // SAFETY: non-null, and the caller guarantees the size prefix is readable.
    let found = unsafe { table.cast::<u32>().read_unaligned() };
    if found < needed {
        return Err(AbiError::TableTooSmall {
            plugin: plugin.to_owned(),
            found,
            needed,
        });
    }
    // SAFETY: the table is at least as long as ours (caller's guarantee for `table_size` bytes),
    // and every bit pattern of `T` is valid (caller).
    Ok(unsafe { table.cast::<T>().read_unaligned() })
}

/// A required function, or [`AbiError::MissingFunction`].
pub(crate) fn required<F>(
    plugin: &str,
    function: Option<F>,
    name: &'static str,
) -> Result<F, AbiError> {
    function.ok_or_else(|| AbiError::MissingFunction {
        plugin: plugin.to_owned(),
        function: name,
    })
}
