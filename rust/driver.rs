// SPDX-License-Identifier: GPL-2.0

//! Loading and unloading: find both providers by name, pick the mode,
//! register the client with the RDMA core, publish the stats.

use kernel::prelude::*;

use crate::client::{ClientTable, DebugFs};
use crate::glue::{self, DeferQueue};
use crate::nvidia::{Missing, NvidiaP2p};
use crate::peer_core::{ClientRegistration, PeerCore, Refused};
use crate::peer_mr::{Client, Mode};
use crate::stats::STATS;

/// The loaded module.
pub(crate) struct PeermemRs {
    debugfs: Option<DebugFs>,
    registration: Option<ClientRegistration>,
    /// Dropped last (after `drop` unregistered the client): waits for the
    /// free callbacks' deferred reference drops.
    _deferred: DeferQueue,
}

/// The `mode` parameter.
fn requested_mode() -> Result<Option<Mode>> {
    match glue::param_mode() {
        "auto" | "" => Ok(None),
        "persistent" => Ok(Some(Mode::Persistent)),
        "invalidate" => Ok(Some(Mode::Invalidate)),
        other => {
            pr_err!("mode={other} is not one of auto, persistent, invalidate\n");
            Err(EINVAL)
        }
    }
}

impl kernel::Module for PeermemRs {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let requested = requested_mode()?;
        let name = glue::param_client_name();
        let Some(core) = PeerCore::find() else {
            pr_err!(
                "no peer-memory support (ib_register_peer_memory_client not found): \
                 load ib_uverbs first if this is MLNX_OFED/DOCA-OFED or an NVIDIA kernel; \
                 otherwise this RDMA stack has none: install MLNX_OFED/DOCA-OFED, or \
                 register GPU memory with dma-buf (ibv_reg_dmabuf_mr) instead\n"
            );
            return Err(ENODEV);
        };
        let nvidia = match NvidiaP2p::find() {
            Ok(nv) => nv,
            Err(Missing::Symbol(sym)) => {
                pr_err!(
                    "the NVIDIA driver is not loaded ({sym} is exported by no loaded \
                     module): load nvidia first (modprobe nvidia)\n"
                );
                return Err(ENODEV);
            }
        };
        // Refused only where an unversioned reference resolved: a provider
        // that is not loaded was reported above.
        if let Some(unversioned) = glue::unversioned_refused() {
            pr_err!(
                "built without the symbol versions of the {unversioned} (none was installed \
                 for this kernel when it was built), but this kernel checks symbol versions \
                 (CONFIG_MODVERSIONS) and would let these calls through unchecked: with the \
                 {unversioned} installed, rebuild: peermem-rs-refresh (DKMS), or make again \
                 (from source); or load with allow_unversioned=1 to accept it (binding {})\n",
                glue::binding()
            );
            return Err(ENOEXEC);
        }
        let mode = match (requested, nvidia.has_persistent()) {
            (Some(Mode::Persistent), false) => {
                pr_err!(
                    "mode=persistent, but this NVIDIA driver has no persistent \
                     P2P API (driver 535 or later): use mode=invalidate or auto\n"
                );
                return Err(EINVAL);
            }
            (Some(m), _) => m,
            (None, true) => Mode::Persistent,
            (None, false) => Mode::Invalidate,
        };
        let invalidation = mode == Mode::Invalidate;
        let deferred = DeferQueue::create()?;
        let table = ClientTable::<Client>::build(name, glue::version(), invalidation).inspect_err(
            |&e| {
                if e == EINVAL {
                    pr_err!("peer_client_name must be 1 to 63 printable characters\n");
                } else {
                    pr_err!("out of memory for the client table ({e:?})\n");
                }
            },
        )?;
        // The core may call `acquire` as soon as the client is registered,
        // before `register` returns with the invalidate entry point: until
        // the client is activated below, `acquire` answers "not mine", so no
        // registration exists that a free could not fence.
        let registration = match ClientRegistration::register(core, table, invalidation) {
            Ok(r) => r,
            Err(Refused::Null) if glue::core_lists_client_name() => {
                pr_err!(
                    "the RDMA core refused the client name '{name}': another loaded \
                     peer-memory client holds it (/sys/kernel/mm/memory_peers/{name}, see \
                     lsmod): unload that client first (under another name this one would \
                     load, but the core asks the client registered first and this one \
                     would serve no GPU memory)\n"
                );
                return Err(EBUSY);
            }
            Err(Refused::Null) => {
                // No client of the name is listed: the core's own
                // allocation failed (its only other NULL is for a table
                // missing a mandatory entry point, which ours never does).
                pr_err!(
                    "the RDMA core could not register the client '{name}' \
                     (ib_register_peer_memory_client returned NULL, which gives no \
                     reason, and no client of that name is listed in \
                     /sys/kernel/mm/memory_peers): on the known cores that leaves its \
                     own allocation failing; try loading again\n"
                );
                return Err(ENOMEM);
            }
            Err(Refused::NoInvalidation) => {
                pr_err!(
                    "the RDMA core registered the client but gave no invalidate \
                     function, which mode=invalidate needs\n"
                );
                return Err(crate::compat::eopnotsupp());
            }
        };
        let client = Client::new(nvidia, mode, name, registration.invalidator())?;
        ClientTable::activate(client);
        let debugfs = DebugFs::create(glue::module_name())
            .map_err(|_| pr_warn!("out of memory for debugfs: stats are not available\n"))
            .ok();
        pr_info!(
            "version {} loaded: client '{}', mode {}{} (kernel {}, binding {})\n",
            glue::version(),
            name,
            mode.name(),
            if requested.is_none() { " (auto)" } else { "" },
            crate::compat::KERNEL_SERIES,
            glue::binding()
        );
        Ok(PeermemRs {
            debugfs,
            registration: Some(registration),
            _deferred: deferred,
        })
    }
}

impl Drop for PeermemRs {
    fn drop(&mut self) {
        // The stats file goes first: removing it waits for readers, which
        // may be reading the client.  Unregistering then waits until the
        // core has released every registration; only then can the
        // trampolines stop serving.
        let stats = DebugFs::remove(self.debugfs.take());
        if let Some(registration) = self.registration.take() {
            let core = registration.unregister();
            drop(ClientTable::<Client>::deactivate(core, stats));
        }
        pr_info!("unloaded (live registrations: {})\n", STATS.live());
    }
}
