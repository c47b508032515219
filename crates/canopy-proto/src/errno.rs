//! POSIX error numbers, with Linux's values so the FUSE layer and the CLI can pass
//! them straight to the kernel or to `strerror`-style wording.

use serde::{Deserialize, Serialize};

macro_rules! errnos {
    ($($name:ident = $num:expr, $text:expr;)*) => {
        /// Every error a Canopy operation can return.
        #[allow(clippy::upper_case_acronyms)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum Errno { $($name,)* }

        impl Errno {
            /// The Linux errno value.
            pub fn code(self) -> i32 { match self { $(Errno::$name => $num,)* } }
            /// The errno for a Linux value, if Canopy uses it.
            pub fn from_code(code: i32) -> Option<Errno> {
                match code { $($num => Some(Errno::$name),)* _ => None }
            }
            /// The coreutils-style wording (`strerror`).
            pub fn text(self) -> &'static str { match self { $(Errno::$name => $text,)* } }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    EIO = 5, "Input/output error";
    ENXIO = 6, "No such device or address";
    EAGAIN = 11, "Resource temporarily unavailable";
    EACCES = 13, "Permission denied";
    EBUSY = 16, "Device or resource busy";
    EEXIST = 17, "File exists";
    EXDEV = 18, "Invalid cross-device link";
    ENOTDIR = 20, "Not a directory";
    EISDIR = 21, "Is a directory";
    EINVAL = 22, "Invalid argument";
    EFBIG = 27, "File too large";
    EMLINK = 31, "Too many links";
    ENAMETOOLONG = 36, "File name too long";
    ENOSYS = 38, "Function not implemented";
    EREMOTE = 66, "Object is remote";
    EREMCHG = 78, "Remote address changed";
    ENOTEMPTY = 39, "Directory not empty";
    ELOOP = 40, "Too many levels of symbolic links";
    EPROTO = 71, "Protocol error";
    EMSGSIZE = 90, "Message too long";
    ENOTCONN = 107, "Transport endpoint is not connected";
    ETIMEDOUT = 110, "Connection timed out";
    ECONNREFUSED = 111, "Connection refused";
    EINPROGRESS = 115, "Operation now in progress";
    ESTALE = 116, "Stale file handle";
    // Appended: the wire names an error by its position in this list.
    ENOSPC = 28, "No space left on device";
    ECANCELED = 125, "Operation canceled";
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for e in [Errno::ENOENT, Errno::ENOTEMPTY, Errno::ENAMETOOLONG, Errno::ESTALE] {
            assert_eq!(Errno::from_code(e.code()), Some(e));
        }
        assert_eq!(Errno::from_code(9999), None);
        assert_eq!(Errno::ENOTEMPTY.text(), "Directory not empty");
    }
}
