//! Signing and checking small messages with munge, the authentication service every Slurm
//! cluster runs (`AuthType=auth/munge`): a compute node signs what it reports, slurmctld learns
//! from a report only when munge says a trusted uid (root or SlurmdUser) on a host with the
//! cluster's key signed it, within the credential's time to live, and never twice (munged
//! refuses a replayed credential).
//!
//! A signer can restrict who may decode its credential ([`Munge::restrict_decoder_uid`]): a
//! report meant for slurmctld is then useless to anyone else who receives it (munged refuses
//! to decode it for any other uid, root included).
//!
//! libmunge is opened at first use (`libmunge.so.2`, present wherever munged is), so a plugin
//! loads, and fails only its reports, on a host without it. The munged socket is the one
//! Slurm's own `AuthInfo=socket=...` names, else munge's default.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fmt;
use std::sync::OnceLock;

type MungeCtx = *mut c_void;
type EncodeFn = unsafe extern "C" fn(*mut *mut c_char, MungeCtx, *const c_void, c_int) -> c_int;
type DecodeFn = unsafe extern "C" fn(*const c_char, MungeCtx, *mut *mut c_void, *mut c_int, *mut u32, *mut u32) -> c_int;
type StrerrorFn = unsafe extern "C" fn(c_int) -> *const c_char;
type CtxCreateFn = unsafe extern "C" fn() -> MungeCtx;
type CtxDestroyFn = unsafe extern "C" fn(MungeCtx);
type CtxSetFn = unsafe extern "C" fn(MungeCtx, c_int, ...) -> c_int;
type CtxGetFn = unsafe extern "C" fn(MungeCtx, c_int, ...) -> c_int;

/// `MUNGE_OPT_ADDR4` of munge.h: the IPv4 address of the host whose munged encoded the
/// credential (`struct in_addr`, network byte order), read after a decode.
const MUNGE_OPT_ADDR4: c_int = 5;
/// `MUNGE_OPT_SOCKET` of munge.h.
const MUNGE_OPT_SOCKET: c_int = 8;
/// `MUNGE_OPT_UID_RESTRICTION` of munge.h: the only uid munged will decode the credential for
/// (`uid_t`), set before an encode.
const MUNGE_OPT_UID_RESTRICTION: c_int = 9;
/// `EMUNGE_SUCCESS`.
const EMUNGE_SUCCESS: c_int = 0;
const RTLD_NOW: c_int = 2;

unsafe extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
    fn free(p: *mut c_void);
}

struct Lib {
    encode: EncodeFn,
    decode: DecodeFn,
    strerror: StrerrorFn,
    ctx_create: CtxCreateFn,
    ctx_destroy: CtxDestroyFn,
    ctx_set: CtxSetFn,
    ctx_get: CtxGetFn,
}

/// Why a message could not be signed or checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MungeError(pub String);

impl fmt::Display for MungeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "munge: {}", self.0)
    }
}

impl std::error::Error for MungeError {}

static LIB: OnceLock<Result<Lib, MungeError>> = OnceLock::new();

fn lib() -> Result<&'static Lib, MungeError> {
    LIB.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; a symbol is transmuted to the
        // function type munge.h declares for it (libmunge's ABI has been stable since 0.5).
        unsafe {
            let handle = dlopen(c"libmunge.so.2".as_ptr(), RTLD_NOW);
            if handle.is_null() {
                let why = dlerror();
                let why = if why.is_null() { "unknown error".into() } else { CStr::from_ptr(why).to_string_lossy().into_owned() };
                return Err(MungeError(format!("cannot load libmunge.so.2 ({why})")));
            }
            let sym = |name: &CStr| {
                let p = dlsym(handle, name.as_ptr());
                if p.is_null() { Err(MungeError(format!("libmunge.so.2 has no {}", name.to_string_lossy()))) } else { Ok(p) }
            };
            Ok(Lib {
                encode: std::mem::transmute::<*mut c_void, EncodeFn>(sym(c"munge_encode")?),
                decode: std::mem::transmute::<*mut c_void, DecodeFn>(sym(c"munge_decode")?),
                strerror: std::mem::transmute::<*mut c_void, StrerrorFn>(sym(c"munge_strerror")?),
                ctx_create: std::mem::transmute::<*mut c_void, CtxCreateFn>(sym(c"munge_ctx_create")?),
                ctx_destroy: std::mem::transmute::<*mut c_void, CtxDestroyFn>(sym(c"munge_ctx_destroy")?),
                ctx_set: std::mem::transmute::<*mut c_void, CtxSetFn>(sym(c"munge_ctx_set")?),
                ctx_get: std::mem::transmute::<*mut c_void, CtxGetFn>(sym(c"munge_ctx_get")?),
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The munged socket named by Slurm's `AuthInfo` (`socket=/path`, among comma-separated
/// options), if any.
pub fn socket_from_authinfo(authinfo: &str) -> Option<String> {
    authinfo.split(',').find_map(|opt| opt.trim().strip_prefix("socket=")).filter(|p| !p.is_empty()).map(str::to_string)
}

/// A munge context bound to one munged socket (`None`: munge's default).
pub struct Munge {
    lib: &'static Lib,
    ctx: MungeCtx,
}

// SAFETY: a context is used by one thread at a time (`&mut self` for every call).
unsafe impl Send for Munge {}

impl Drop for Munge {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from munge_ctx_create and is destroyed once.
        unsafe { (self.lib.ctx_destroy)(self.ctx) }
    }
}

/// What a credential carried and who signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub payload: Vec<u8>,
    pub uid: u32,
    pub gid: u32,
    /// The IPv4 address the encoding host's munged gave as its own (`None`: munged did not
    /// know it, 0.0.0.0, or libmunge did not say).
    pub origin_ipv4: Option<std::net::Ipv4Addr>,
}

impl Munge {
    pub fn new(socket: Option<&str>) -> Result<Munge, MungeError> {
        let lib = lib()?;
        // SAFETY: a fresh context (NULL on allocation failure, checked).
        let ctx = unsafe { (lib.ctx_create)() };
        if ctx.is_null() {
            return Err(MungeError("cannot create a context".into()));
        }
        let m = Munge { lib, ctx };
        if let Some(path) = socket {
            let c = CString::new(path).map_err(|_| MungeError(format!("socket path {path:?} holds a NUL")))?;
            // SAFETY: MUNGE_OPT_SOCKET takes one `const char *`, copied into the context.
            let rc = unsafe { (lib.ctx_set)(ctx, MUNGE_OPT_SOCKET, c.as_ptr()) };
            if rc != EMUNGE_SUCCESS {
                return Err(m.error(rc, &format!("socket {path}")));
            }
        }
        Ok(m)
    }

    /// Credentials encoded from now on can be decoded only by a process running as `uid`
    /// (munged checks the decoding client's uid; root is not exempt).
    pub fn restrict_decoder_uid(&mut self, uid: u32) -> Result<(), MungeError> {
        // SAFETY: MUNGE_OPT_UID_RESTRICTION takes one `uid_t` (unsigned int, 32 bits on every
        // platform Slurm runs on) by value; `ctx` is a live context.
        let rc = unsafe { (self.lib.ctx_set)(self.ctx, MUNGE_OPT_UID_RESTRICTION, uid as std::ffi::c_uint) };
        if rc != EMUNGE_SUCCESS {
            return Err(self.error(rc, &format!("restricting decoding to uid {uid}")));
        }
        Ok(())
    }

    /// The origin address of the credential decoded last.
    fn origin_ipv4(&self) -> Option<std::net::Ipv4Addr> {
        let mut addr = [0u8; 4];
        // SAFETY: MUNGE_OPT_ADDR4 writes one `struct in_addr` (4 bytes, network order) through
        // the pointer, which points to a local of that size; `ctx` is a live context.
        let rc = unsafe { (self.lib.ctx_get)(self.ctx, MUNGE_OPT_ADDR4, addr.as_mut_ptr()) };
        let ip = std::net::Ipv4Addr::from(addr);
        (rc == EMUNGE_SUCCESS && !ip.is_unspecified()).then_some(ip)
    }

    fn error(&self, rc: c_int, what: &str) -> MungeError {
        // SAFETY: munge_strerror returns a static string (or NULL).
        let text = unsafe {
            let p = (self.lib.strerror)(rc);
            if p.is_null() { format!("error {rc}") } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
        };
        MungeError(format!("{what}: {text}"))
    }

    /// Signs `payload`: the credential text to send.
    pub fn encode(&mut self, payload: &[u8]) -> Result<String, MungeError> {
        let len = c_int::try_from(payload.len()).map_err(|_| MungeError("payload too long".into()))?;
        let mut cred: *mut c_char = std::ptr::null_mut();
        // SAFETY: `payload` is readable for `len` bytes; on success munge writes a malloc'd,
        // NUL-terminated credential to `cred`, which we copy and free.
        unsafe {
            let rc = (self.lib.encode)(&mut cred, self.ctx, payload.as_ptr().cast(), len);
            if rc != EMUNGE_SUCCESS || cred.is_null() {
                return Err(self.error(rc, "encode"));
            }
            let text = CStr::from_ptr(cred).to_string_lossy().into_owned();
            free(cred.cast());
            Ok(text)
        }
    }

    /// Checks a credential: its payload and the uid and gid that signed it. Expired, replayed,
    /// foreign-key or garbled credentials are errors.
    pub fn decode(&mut self, cred: &str) -> Result<Verified, MungeError> {
        let c = CString::new(cred.trim()).map_err(|_| MungeError("credential holds a NUL".into()))?;
        let (mut buf, mut len, mut uid, mut gid): (*mut c_void, c_int, u32, u32) = (std::ptr::null_mut(), 0, u32::MAX, u32::MAX);
        // SAFETY: out-pointers to locals; on return munge may have malloc'd `buf` (`len`
        // bytes), which we copy and free whatever the result.
        unsafe {
            let rc = (self.lib.decode)(c.as_ptr(), self.ctx, &mut buf, &mut len, &mut uid, &mut gid);
            let payload = if buf.is_null() || len <= 0 { Vec::new() } else { std::slice::from_raw_parts(buf.cast::<u8>(), len as usize).to_vec() };
            if !buf.is_null() {
                free(buf);
            }
            if rc != EMUNGE_SUCCESS {
                return Err(self.error(rc, "decode"));
            }
            Ok(Verified { payload, uid, gid, origin_ipv4: self.origin_ipv4() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_comes_from_authinfo() {
        assert_eq!(socket_from_authinfo("socket=/run/m/munge.socket"), Some("/run/m/munge.socket".into()));
        assert_eq!(socket_from_authinfo("cred_expire=30, socket=/s,ttl=60"), Some("/s".into()));
        assert_eq!(socket_from_authinfo("ttl=60"), None);
        assert_eq!(socket_from_authinfo(""), None);
    }

    #[test]
    fn a_dead_socket_is_an_error_not_a_hang() {
        // libmunge is installed wherever Slurm is (the live tests' munged needs it too).
        let mut m = Munge::new(Some("/nonexistent/munge.socket")).expect("libmunge.so.2 loads");
        let e = m.encode(b"x").expect_err("no munged there");
        assert!(e.to_string().contains("encode"), "{e}");
    }
}
