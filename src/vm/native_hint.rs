//! Which native-code annotations a chunk carries, read from the bytecode Skein's compiler made.
//!
//! Luau's compiler records them as flags on the chunk's root function: `LPF_NATIVE_MODULE` when
//! the source starts with the `--!native` hot comment, `LPF_NATIVE_FUNCTION` when some function
//! is marked `@native` (the two are exclusive). Reading the flags, not the text, means a string
//! literal that says `@native` or a `--!native` line below the first statement changes nothing,
//! exactly as Luau's own tooling sees it.
//!
//! This module only reads bytes; it never touches a VM. A chunk it cannot read (a bytecode
//! version it does not know) answers [`Annotation::Unknown`], which runs interpreted in the
//! annotated mode: the reader's unit tests fail on a Luau upgrade that changes the format.

/// `LPF_NATIVE_MODULE` (Luau's `Bytecode.h`): the source starts with `--!native`.
const LPF_NATIVE_MODULE: u8 = 1 << 0;
/// `LPF_NATIVE_FUNCTION`: some function of a module without `--!native` is marked `@native`.
const LPF_NATIVE_FUNCTION: u8 = 1 << 2;

/// The bytecode versions this reader knows (Luau 0.740 writes 9 or 11, and reads 3 to 14).
const VERSIONS: std::ops::RangeInclusive<u8> = 3..=14;
/// From this version on, every function is preceded by its size in bytes.
const SIZED_PROTOS: u8 = 12;
/// From this version on, a function has a call-feedback vector.
const FEEDBACK: u8 = 11;

/// Luau's constant kinds (`LBC_CONSTANT_*`), as far as the reader needs to skip them.
mod constant {
    pub(super) const NIL: u8 = 0;
    pub(super) const BOOLEAN: u8 = 1;
    pub(super) const NUMBER: u8 = 2;
    pub(super) const STRING: u8 = 3;
    pub(super) const IMPORT: u8 = 4;
    pub(super) const TABLE: u8 = 5;
    pub(super) const CLOSURE: u8 = 6;
    pub(super) const VECTOR: u8 = 7;
    pub(super) const TABLE_WITH_CONSTANTS: u8 = 8;
    pub(super) const INTEGER: u8 = 9;
    pub(super) const CLASS_SHAPE: u8 = 10;
    pub(super) const VECTORD: u8 = 11;
}

/// What a chunk asks of the code generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Annotation {
    /// Nothing: no `--!native`, no `@native` function.
    None,
    /// `--!native`: every function of the chunk (but functions Luau deems cold).
    Module,
    /// Some functions are marked `@native`: only those.
    Functions,
    /// The bytecode could not be read.
    Unknown,
}

impl Annotation {
    /// Whether the chunk asks for native code.
    pub(crate) fn asks_native(self) -> bool {
        matches!(self, Annotation::Module | Annotation::Functions)
    }
}

/// The annotation of the chunk `bytecode` (the output of Skein's compiler).
pub(crate) fn annotation(bytecode: &[u8]) -> Annotation {
    match root_flags(bytecode) {
        Some(flags) if flags & LPF_NATIVE_MODULE != 0 => Annotation::Module,
        Some(flags) if flags & LPF_NATIVE_FUNCTION != 0 => Annotation::Functions,
        Some(_) => Annotation::None,
        None => Annotation::Unknown,
    }
}

/// The flags of the chunk's root function, following Luau's loader (`lvmload.cpp`) field by
/// field; `None` where the bytes do not parse.
fn root_flags(bytecode: &[u8]) -> Option<u8> {
    let mut r = Reader {
        data: bytecode,
        at: 0,
    };
    let version = r.byte()?;
    if !VERSIONS.contains(&version) {
        return None;
    }
    let types_version = if version >= 4 { r.byte()? } else { 0 };
    for _ in 0..r.varint()? {
        let len = r.varint()?;
        r.skip(len as usize)?;
    }
    if types_version == 3 {
        // The userdata type names: index, name; 0 ends the list.
        while r.byte()? != 0 {
            r.varint()?;
        }
    }
    let count = r.varint()? as usize;
    // Each function takes several bytes, so the count cannot honestly pass the chunk's length.
    let mut flags = Vec::with_capacity(count.min(bytecode.len()));
    for _ in 0..count {
        flags.push(proto_flags(&mut r, version)?);
    }
    let main = r.varint()? as usize;
    flags.get(main).copied()
}

/// Reads one function, answering its flags.
fn proto_flags(r: &mut Reader<'_>, version: u8) -> Option<u8> {
    let end = if version >= SIZED_PROTOS {
        let size = r.varint()? as usize;
        Some(r.at.checked_add(size)?)
    } else {
        None
    };
    // maxstacksize, numparams, nups, is_vararg
    r.skip(4)?;
    let flags = if version >= 4 { r.byte()? } else { 0 };
    if let Some(end) = end {
        (end <= r.data.len()).then_some(())?;
        r.at = end;
        return Some(flags);
    }
    if version >= 4 {
        let types = r.varint()?;
        r.skip(types as usize)?;
    }
    let code = r.varint()? as usize;
    r.skip(code.checked_mul(4)?)?;
    for _ in 0..r.varint()? {
        skip_constant(r)?;
    }
    for _ in 0..r.varint()? {
        r.varint()?; // child function ids
    }
    r.varint()?; // linedefined
    r.varint()?; // debugname
    if r.byte()? != 0 {
        let gap_log2 = r.byte()?;
        let intervals = ((code as i64 - 1) >> gap_log2.min(63)) + 1;
        r.skip(code)?;
        r.skip(usize::try_from(intervals).ok()?.checked_mul(4)?)?;
    }
    if r.byte()? != 0 {
        for _ in 0..r.varint()? {
            r.varint()?; // name
            r.varint()?; // startpc
            r.varint()?; // endpc
            r.skip(1)?; // register
        }
        for _ in 0..r.varint()? {
            r.varint()?; // upvalue name
        }
    }
    if version >= FEEDBACK {
        for _ in 0..r.varint()? {
            r.skip(1)?; // slot kind
            r.varint()?; // pc
        }
    }
    Some(flags)
}

fn skip_constant(r: &mut Reader<'_>) -> Option<()> {
    match r.byte()? {
        constant::NIL => Some(()),
        constant::BOOLEAN => r.skip(1),
        constant::NUMBER => r.skip(8),
        constant::STRING | constant::CLOSURE => r.varint().map(drop),
        constant::IMPORT => r.skip(4),
        constant::VECTOR => r.skip(16),
        constant::VECTORD => r.skip(32),
        constant::TABLE => {
            for _ in 0..r.varint()? {
                r.varint()?;
            }
            Some(())
        }
        constant::TABLE_WITH_CONSTANTS => {
            for _ in 0..r.varint()? {
                r.varint()?;
                r.skip(4)?;
            }
            Some(())
        }
        constant::INTEGER => {
            r.skip(1)?;
            r.varint64().map(drop)
        }
        constant::CLASS_SHAPE => {
            r.varint()?; // class name
            let members = u64::from(r.varint()?) + u64::from(r.varint()?);
            for _ in 0..members {
                r.varint()?;
            }
            Some(())
        }
        _ => None,
    }
}

/// A cursor over the bytecode; every read checks the length.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        let end = self.at.checked_add(n)?;
        (end <= self.data.len()).then(|| self.at = end)
    }

    /// Luau's varint: 7 bits a byte, low first, the high bit says more follow.
    fn varint(&mut self) -> Option<u32> {
        u32::try_from(self.varint64()?).ok()
    }

    fn varint64(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::source;
    use super::*;

    fn of(text: &str) -> Annotation {
        annotation(&source::compiler().compile(text).expect("compiles"))
    }

    #[test]
    fn the_hot_comment_marks_the_module() {
        assert_eq!(
            of("--!native\nlocal function f(x) return x * 2 end\nreturn f"),
            Annotation::Module
        );
        // After other header comments too, as Luau reads header hot comments.
        assert_eq!(
            of("-- a kernel\n--!strict\n--!native\nreturn function(x) return x end"),
            Annotation::Module
        );
    }

    #[test]
    fn a_native_attribute_marks_its_functions() {
        let text =
            "local M = {}\n@native\nfunction M.f(x) return x + 1 end\nfunction M.g() end\nreturn M";
        assert_eq!(of(text), Annotation::Functions);
    }

    #[test]
    fn text_that_only_mentions_native_marks_nothing() {
        assert_eq!(
            of("return { '@native', \"--!native\", [[@native]] }"),
            Annotation::None
        );
        // A hot comment below the first statement is not a header: Luau ignores it.
        assert_eq!(of("local x = 1\n--!native\nreturn x"), Annotation::None);
        assert_eq!(of("-- @native\nreturn 1"), Annotation::None);
        assert_eq!(of("--[[ --!native ]] return 1"), Annotation::None);
    }

    #[test]
    fn every_constant_kind_and_debug_section_is_skipped() {
        // Numbers, strings, imports, tables (with constants), closures, vectors, booleans, nil,
        // locals and upvalues in several functions ahead of the root.
        let text = r#"
            local t = { a = 1, b = "x", c = true }
            local v = vector.create(1, 2, 3)
            local function a(x, y) local z = x + y * 2.5 return function() return z, t, v end end
            local function b() return math.floor(1.5), string.rep("y", 3), nil, false end
            @native local function c(n) local s = 0 for i = 1, n do s += i end return s end
            return { a, b, c, { 1, 2, 3 }, 2 ^ 60 }
        "#;
        assert_eq!(of(text), Annotation::Functions);
        assert_eq!(of(&format!("--!native\n{text}")), Annotation::Module);
        assert_eq!(of(&text.replace("@native", "")), Annotation::None);
    }

    #[test]
    fn bytes_that_do_not_parse_are_unknown() {
        let good = source::compiler()
            .compile("--!native\nreturn 1")
            .expect("compiles");
        for cut in 0..good.len() {
            assert_eq!(
                annotation(&good[..cut]),
                Annotation::Unknown,
                "cut at {cut}"
            );
        }
        assert_eq!(annotation(&[]), Annotation::Unknown);
        assert_eq!(annotation(&[200, 3, 0]), Annotation::Unknown);
    }
}
