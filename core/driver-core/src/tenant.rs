//! Tenants: who the device's quotas bind (docs/security.md, docs/abi.md 3). A tenant is the
//! container a client runs in (its cgroup's container id, [`crate::container`]) when it runs
//! in one, else its user: every open of one container, whatever uids it runs as (a rootless
//! container's subordinate uids too), or of one user outside containers, shares one
//! tenant's quotas, slot and share.

use crate::limits::CONTAINER_LEN;

/// The tenant an open belongs to; the host establishes it with the credentials
/// ([`Tenant::of`], or its own rule, e.g. the daemon counts clients in its own container by
/// user: that container is the host, not a tenant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tenant {
    /// A user outside any container (or inside the host's own).
    User(u32),
    /// A container, by its id (NUL-padded, as `OpenParams::container`).
    Container([u8; CONTAINER_LEN]),
}

impl Tenant {
    /// The tenant of an opener with `uid` in `container` (NUL-padded; all NULs: none): the
    /// container if there is one, else the user.
    pub const fn of(uid: u32, container: &[u8; CONTAINER_LEN]) -> Tenant {
        if container[0] == 0 {
            Tenant::User(uid)
        } else {
            Tenant::Container(*container)
        }
    }

    /// [`Tenant::of`], except that an opener in `host_container` (the host's own container,
    /// NUL-padded; all NULs: the host runs in none) is counted by user: every client there
    /// runs beside the host, and one container would make every user of it one tenant.
    pub fn of_beside(
        uid: u32,
        container: &[u8; CONTAINER_LEN],
        host_container: &[u8; CONTAINER_LEN],
    ) -> Tenant {
        if host_container[0] != 0 && container == host_container {
            Tenant::User(uid)
        } else {
            Tenant::of(uid, container)
        }
    }

    /// LIST_CLIENTS' `tenant_kind` (`DAVINCI_TENANT_*`).
    pub const fn kind(&self) -> u32 {
        match self {
            Tenant::User(_) => davinci_uapi::TENANT_USER,
            Tenant::Container(_) => davinci_uapi::TENANT_CONTAINER,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::container_field;

    #[test]
    fn a_container_is_one_tenant_whatever_its_uids_and_a_user_is_one_outside() {
        let c = container_field("3f1c2b8e9a7d");
        assert_eq!(Tenant::of(2001, &c), Tenant::of(100_000, &c));
        assert_eq!(Tenant::of(2001, &[0; CONTAINER_LEN]), Tenant::User(2001));
        assert_ne!(
            Tenant::of(2001, &[0; CONTAINER_LEN]),
            Tenant::of(2002, &[0; CONTAINER_LEN])
        );
        assert_ne!(Tenant::of(2001, &c), Tenant::User(2001));
        // The host's own container counts its clients by user.
        assert_eq!(Tenant::of_beside(7, &c, &c), Tenant::User(7));
        let other = container_field("aaaabbbbcccc");
        assert_eq!(Tenant::of_beside(7, &other, &c), Tenant::Container(other));
        assert_eq!(
            Tenant::of_beside(7, &[0; CONTAINER_LEN], &[0; CONTAINER_LEN]),
            Tenant::User(7)
        );
        assert_eq!(Tenant::User(1).kind(), davinci_uapi::TENANT_USER);
        assert_eq!(Tenant::Container(c).kind(), davinci_uapi::TENANT_CONTAINER);
    }
}
