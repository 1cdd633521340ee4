//! A Python pickle read as data, never run: the stack machine of Python's unpickler for the opcodes a PyTorch state
//! dict is written with (protocols 2 to 5), which only builds values. What the pickle may name (GLOBAL,
//! STACK_GLOBAL), what a persistent id (BINPERSID) stands for, what calling a named thing (REDUCE) makes and what
//! BUILD may change are the [`Loader`]'s to allow or refuse ([`super::torch_bin`] allows a state dict's few names).
//! Whatever a pickle names, nothing is looked up or called: an allowed name becomes a value of the loader's own.
//!
//! Everything is bounded, so a hostile file cannot exhaust memory, time or the call stack: the pickle's bytes (the
//! caller's `len`, at most [`MAX_PICKLE_BYTES`]), the stack and the marks ([`MAX_STACK`]), the memo ([`MAX_MEMO`]),
//! the elements copied when a container the memo shares is changed ([`MAX_COPIES`]: values are shared, not copied,
//! so a pickle that fetches one list over and over costs a pointer each time), and how deep containers nest
//! ([`MAX_DEPTH`]: dropping a value recurses through them). A string's length is checked against the bytes left
//! before anything is allocated for it. Values are never changed where the memo also holds them (copy on write), so
//! no value can hold itself.
//!
//! Opcodes that make objects of classes (INST, OBJ, NEWOBJ, NEWOBJ_EX), the extension registry (EXT1/2/4), the text
//! protocol-0 forms and byte strings are refused by name: a state dict is written without them.

use std::collections::HashMap;
use std::io::Read;
use std::rc::Rc;

use crate::{Error, Result};

/// The most bytes one pickle may have. A BERT-large state dict's pickle is ~60 kB; one of 100,000 tensors ~10 MB.
pub const MAX_PICKLE_BYTES: u64 = 64 << 20;
/// The most values on the stack, marks included (a state dict's deepest batch is 1,000 items and their keys).
pub const MAX_STACK: usize = 100_000;
/// The most memo entries (a state dict uses about eight a tensor).
pub const MAX_MEMO: usize = 1 << 20;
/// The most elements copied, in all, when a container that the memo also holds is changed (copy on write).
pub const MAX_COPIES: usize = 1 << 22;
/// The deepest containers may nest (a state dict's are four deep).
pub const MAX_DEPTH: u32 = 256;
/// The longest module or class name GLOBAL may give.
const MAX_NAME: usize = 256;

/// A value the pickle built. `O`: the loader's own values (what an allowed name, a persistent id or a call made).
#[derive(Clone, Debug)]
pub enum Value<O> {
    None,
    Bool(bool),
    Int(i64),
    /// An integer of more than 8 bytes (LONG1/LONG4): its little-endian two's-complement bytes.
    BigInt(Rc<[u8]>),
    Float(f64),
    Str(Rc<str>),
    Tuple(Rc<Items<Value<O>>>),
    List(Rc<Items<Value<O>>>),
    /// A dict (or an OrderedDict) in the order its items came; a repeated key is the loader's to refuse.
    Dict(Rc<Items<(Value<O>, Value<O>)>>),
    Obj(O),
}

/// A container's items (a slice, through `Deref`), and how deep the containers it holds nest, itself included.
#[derive(Clone, Debug)]
pub struct Items<T> {
    depth: u32,
    items: Vec<T>,
}

impl<T> std::ops::Deref for Items<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items
    }
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Items { depth: 1, items: Vec::new() }
    }
}

impl<O> Value<O> {
    /// What the value is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) | Value::BigInt(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::Tuple(_) => "a tuple",
            Value::List(_) => "a list",
            Value::Dict(_) => "a dict",
            Value::Obj(_) => "an object",
        }
    }

    /// How deep the containers in this value nest (0: not a container).
    fn depth(&self) -> u32 {
        match self {
            Value::Tuple(t) | Value::List(t) => t.depth,
            Value::Dict(d) => d.depth,
            _ => 0,
        }
    }
}

/// The depth of a container holding values of depths `inner`, refused past [`MAX_DEPTH`].
fn deeper(inner: impl Iterator<Item = u32>, what: &str) -> Result<u32> {
    let d = 1 + inner.max().unwrap_or(0);
    if d > MAX_DEPTH {
        return Err(bad(what, format!("containers nested more than {MAX_DEPTH} deep")));
    }
    Ok(d)
}

/// A tuple or list of `items`.
fn seq<O>(items: Vec<Value<O>>, what: &str) -> Result<Rc<Items<Value<O>>>> {
    Ok(Rc::new(Items { depth: deeper(items.iter().map(Value::depth), what)?, items }))
}

/// What a pickle may name and do, beyond plain data: each method either makes a value of the loader's own or
/// refuses (an error naming what was refused).
pub trait Loader {
    type Obj: Clone;
    /// GLOBAL / STACK_GLOBAL `module.name`.
    fn find_class(&mut self, module: &str, name: &str) -> Result<Self::Obj>;
    /// BINPERSID: the value a persistent id stands for.
    fn persistent_load(&mut self, pid: Value<Self::Obj>) -> Result<Value<Self::Obj>>;
    /// REDUCE: `callable(*args)`, where `callable` is a value the loader made.
    fn reduce(&mut self, callable: Self::Obj, args: &[Value<Self::Obj>]) -> Result<Value<Self::Obj>>;
    /// BUILD: `state` given to `target` (`__setstate__`); the loader says whether that is allowed (nothing changes).
    fn build(&mut self, target: &Value<Self::Obj>, state: &Value<Self::Obj>) -> Result<()>;
}

/// The bytes of a pickle, counted and bounded.
struct Input<'r> {
    r: &'r mut dyn Read,
    pos: u64,
    len: u64,
}

impl Input<'_> {
    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>> {
        if n > self.len - self.pos {
            return Err(truncated(what));
        }
        let mut v = vec![0u8; n as usize];
        self.r.read_exact(&mut v).map_err(|_| truncated(what))?;
        self.pos += n;
        Ok(v)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        if (N as u64) > self.len - self.pos {
            return Err(truncated(what));
        }
        let mut a = [0u8; N];
        self.r.read_exact(&mut a).map_err(|_| truncated(what))?;
        self.pos += N as u64;
        Ok(a)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// A GLOBAL's text line: up to its newline, at most [`MAX_NAME`] bytes.
    fn line(&mut self, what: &str) -> Result<String> {
        let mut out = Vec::new();
        loop {
            match self.u8(what)? {
                b'\n' => break,
                b if out.len() < MAX_NAME => out.push(b),
                _ => return Err(bad(what, format!("a GLOBAL name longer than {MAX_NAME} bytes"))),
            }
        }
        String::from_utf8(out).map_err(|_| bad(what, "a GLOBAL name that is not UTF-8 text".into()))
    }
    fn string(&mut self, n: u64, what: &str) -> Result<Rc<str>> {
        let b = self.bytes(n, what)?;
        String::from_utf8(b).map(Rc::from).map_err(|_| bad(what, "a string that is not UTF-8".into()))
    }
}

fn truncated(what: &str) -> Error {
    Error::Weights(format!("{what}: its pickle ends before its STOP opcode: the file is truncated or damaged; download it again"))
}

fn bad(what: &str, msg: String) -> Error {
    Error::Weights(format!("{what}: its pickle has {msg}"))
}

/// The names of opcodes a state dict is never written with, for the refusal.
fn refused_opcode(op: u8) -> Option<&'static str> {
    Some(match op {
        b'i' => "INST (an object of a class)",
        b'o' => "OBJ (an object of a class)",
        0x81 => "NEWOBJ (an object of a class: `__reduce__` of a class of its own)",
        0x92 => "NEWOBJ_EX (an object of a class)",
        0x82..=0x84 => "EXT (the copyreg extension registry)",
        b'P' => "PERSID (a text persistent id)",
        b'I' | b'L' | b'F' | b'S' | b'V' | b'p' | b'g' => "a protocol-0 text opcode",
        b'T' | b'U' | b'B' | b'C' | 0x8e | 0x96 => "a byte string",
        0x8f..=0x91 => "a set",
        0x97 | 0x98 => "an out-of-band buffer",
        _ => return None,
    })
}

/// The machine's state: the stack, the marks (where each MARK left the stack), the memo, the copies made.
struct Machine<L: Loader> {
    stack: Vec<Value<L::Obj>>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value<L::Obj>>,
    copies: usize,
}

impl<L: Loader> Machine<L> {
    fn push(&mut self, v: Value<L::Obj>, what: &str) -> Result<()> {
        if self.stack.len() + self.marks.len() >= MAX_STACK {
            return Err(bad(what, format!("more than {MAX_STACK} values and marks on its stack")));
        }
        self.stack.push(v);
        Ok(())
    }
    fn pop(&mut self, what: &str) -> Result<Value<L::Obj>> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(bad(what, "an opcode that takes a value from an empty stack".into()));
        }
        Ok(self.stack.pop().expect("checked"))
    }
    fn top(&mut self, what: &str) -> Result<&mut Value<L::Obj>> {
        self.stack.last_mut().ok_or_else(|| bad(what, "an opcode that needs a value on an empty stack".into()))
    }
    /// The values since the last MARK, which is removed.
    fn pop_mark(&mut self, what: &str) -> Result<Vec<Value<L::Obj>>> {
        let at = self.marks.pop().ok_or_else(|| bad(what, "an opcode that needs a MARK where none is".into()))?;
        Ok(self.stack.split_off(at))
    }
    fn pop_n(&mut self, n: usize, what: &str) -> Result<Vec<Value<L::Obj>>> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + n {
            return Err(bad(what, "a TUPLE of more values than its stack holds".into()));
        }
        Ok(self.stack.split_off(self.stack.len() - n))
    }
    /// Counts the elements a copy on write of a container of `len` elements copies, if it is shared.
    fn charge(&mut self, shared: bool, len: usize, what: &str) -> Result<()> {
        if shared {
            self.copies += len;
            if self.copies > MAX_COPIES {
                return Err(bad(what, format!("more than {MAX_COPIES} elements copied between its memo and stack")));
            }
        }
        Ok(())
    }
    fn append(&mut self, items: Vec<Value<L::Obj>>, what: &str) -> Result<()> {
        let copies = match self.top(what)? {
            Value::List(l) => (Rc::strong_count(l) > 1, l.len()),
            other => return Err(bad(what, format!("APPEND to {}, not a list", other.kind()))),
        };
        self.charge(copies.0, copies.1, what)?;
        if let Value::List(l) = self.top(what)? {
            let depth = deeper(items.iter().map(Value::depth), what)?.max(l.depth);
            let l = Rc::make_mut(l);
            l.depth = depth;
            l.items.extend(items);
        }
        Ok(())
    }
    fn set_items(&mut self, items: Vec<Value<L::Obj>>, what: &str) -> Result<()> {
        if items.len() % 2 != 0 {
            return Err(bad(what, "SETITEMS of an odd number of values".into()));
        }
        let copies = match self.top(what)? {
            Value::Dict(d) => (Rc::strong_count(d) > 1, d.len()),
            other => return Err(bad(what, format!("SETITEM on {}, not a dict", other.kind()))),
        };
        self.charge(copies.0, copies.1, what)?;
        if let Value::Dict(d) = self.top(what)? {
            let depth = deeper(items.iter().map(Value::depth), what)?.max(d.depth);
            let d = Rc::make_mut(d);
            d.depth = depth;
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                d.items.push((k, v));
            }
        }
        Ok(())
    }
    fn memo_put(&mut self, idx: u32, what: &str) -> Result<()> {
        let v = self.stack.last().cloned().ok_or_else(|| bad(what, "a memo PUT of an empty stack".into()))?;
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&idx) {
            return Err(bad(what, format!("more than {MAX_MEMO} memo entries")));
        }
        self.memo.insert(idx, v);
        Ok(())
    }
    fn memo_get(&mut self, idx: u32, what: &str) -> Result<()> {
        let v = self.memo.get(&idx).cloned().ok_or_else(|| bad(what, format!("a memo GET of entry {idx}, never PUT")))?;
        self.push(v, what)
    }
}

/// Runs the pickle that starts at `r` (of at most `len` bytes from there) to its STOP: the value it built, and the
/// number of bytes it took. `what` names the file in every error. (`r` is a `dyn Read`, so that the machine is
/// compiled once per loader, not once per reader: a wasm module carries every copy.)
pub fn load<L: Loader>(r: &mut dyn Read, len: u64, loader: &mut L, what: &str) -> Result<(Value<L::Obj>, u64)> {
    let mut inp = Input { r, pos: 0, len: len.min(MAX_PICKLE_BYTES) };
    let mut m: Machine<L> = Machine { stack: Vec::new(), marks: Vec::new(), memo: HashMap::new(), copies: 0 };
    loop {
        let op = inp.u8(what)?;
        match op {
            0x80 => {
                let p = inp.u8(what)?;
                if p > 5 {
                    return Err(bad(what, format!("protocol {p}; PyTorch writes 2 (Python reads up to 5)")));
                }
            }
            0x95 => {
                inp.array::<8>(what)?; // FRAME: a length hint only
            }
            b'.' => {
                let v = m.pop(what)?;
                return Ok((v, inp.pos));
            }
            b'(' => {
                if m.stack.len() + m.marks.len() >= MAX_STACK {
                    return Err(bad(what, format!("more than {MAX_STACK} values and marks on its stack")));
                }
                m.marks.push(m.stack.len());
            }
            b'}' => m.push(Value::Dict(Rc::default()), what)?,
            b']' => m.push(Value::List(Rc::default()), what)?,
            b')' => m.push(Value::Tuple(Rc::default()), what)?,
            b't' => {
                let items = m.pop_mark(what)?;
                m.push(Value::Tuple(seq(items, what)?), what)?;
            }
            0x85..=0x87 => {
                let items = m.pop_n((op - 0x84) as usize, what)?;
                m.push(Value::Tuple(seq(items, what)?), what)?;
            }
            b'l' => {
                let items = m.pop_mark(what)?;
                m.push(Value::List(seq(items, what)?), what)?;
            }
            b'd' => {
                let items = m.pop_mark(what)?;
                m.push(Value::Dict(Rc::default()), what)?;
                m.set_items(items, what)?;
            }
            b'a' => {
                let v = m.pop(what)?;
                m.append(vec![v], what)?;
            }
            b'e' => {
                let items = m.pop_mark(what)?;
                m.append(items, what)?;
            }
            b's' => {
                let v = m.pop(what)?;
                let k = m.pop(what)?;
                m.set_items(vec![k, v], what)?;
            }
            b'u' => {
                let items = m.pop_mark(what)?;
                m.set_items(items, what)?;
            }
            b'q' => {
                let i = inp.u8(what)? as u32;
                m.memo_put(i, what)?;
            }
            b'r' => {
                let i = inp.u32(what)?;
                m.memo_put(i, what)?;
            }
            0x94 => {
                let i = u32::try_from(m.memo.len()).expect("bounded by MAX_MEMO");
                m.memo_put(i, what)?;
            }
            b'h' => {
                let i = inp.u8(what)? as u32;
                m.memo_get(i, what)?;
            }
            b'j' => {
                let i = inp.u32(what)?;
                m.memo_get(i, what)?;
            }
            b'J' => m.push(Value::Int(i32::from_le_bytes(inp.array(what)?) as i64), what)?,
            b'K' => m.push(Value::Int(inp.u8(what)? as i64), what)?,
            b'M' => m.push(Value::Int(u16::from_le_bytes(inp.array(what)?) as i64), what)?,
            0x8a | 0x8b => {
                let n = if op == 0x8a { inp.u8(what)? as u64 } else { inp.u32(what)? as u64 };
                let b = inp.bytes(n, what)?;
                m.push(long(&b), what)?;
            }
            b'G' => m.push(Value::Float(f64::from_be_bytes(inp.array(what)?)), what)?,
            b'N' => m.push(Value::None, what)?,
            0x88 => m.push(Value::Bool(true), what)?,
            0x89 => m.push(Value::Bool(false), what)?,
            b'X' | 0x8c | 0x8d => {
                let n = match op {
                    b'X' => inp.u32(what)? as u64,
                    0x8c => inp.u8(what)? as u64,
                    _ => u64::from_le_bytes(inp.array(what)?),
                };
                let s = inp.string(n, what)?;
                m.push(Value::Str(s), what)?;
            }
            b'c' => {
                let module = inp.line(what)?;
                let name = inp.line(what)?;
                let o = loader.find_class(&module, &name)?;
                m.push(Value::Obj(o), what)?;
            }
            0x93 => {
                let name = m.pop(what)?;
                let module = m.pop(what)?;
                let (Value::Str(module), Value::Str(name)) = (module, name) else {
                    return Err(bad(what, "a STACK_GLOBAL whose module and name are not strings".into()));
                };
                let o = loader.find_class(&module, &name)?;
                m.push(Value::Obj(o), what)?;
            }
            b'Q' => {
                let pid = m.pop(what)?;
                let v = loader.persistent_load(pid)?;
                m.push(v, what)?;
            }
            b'R' => {
                let args = m.pop(what)?;
                let callable = m.pop(what)?;
                let Value::Tuple(args) = args else {
                    return Err(bad(what, format!("a REDUCE whose arguments are {}, not a tuple", args.kind())));
                };
                let Value::Obj(callable) = callable else {
                    return Err(bad(what, format!("a REDUCE that calls {}", callable.kind())));
                };
                let v = loader.reduce(callable, &args)?;
                m.push(v, what)?;
            }
            b'b' => {
                let state = m.pop(what)?;
                let target = m.top(what)?.clone();
                loader.build(&target, &state)?;
            }
            b'0' => {
                m.pop(what)?;
            }
            b'1' => {
                m.pop_mark(what)?;
            }
            b'2' => {
                let v = m.top(what)?.clone();
                m.push(v, what)?;
            }
            other => {
                return Err(bad(what, match refused_opcode(other) {
                    Some(name) => format!("the opcode {name}, which a PyTorch state dict is not written with: refused"),
                    None => format!("an unknown opcode 0x{other:02x}: it is not a pickle PyTorch wrote"),
                }))
            }
        }
    }
}

/// A LONG1/LONG4 integer: an i64 where it fits in 8 bytes, else its bytes.
fn long<O>(b: &[u8]) -> Value<O> {
    if b.len() > 8 {
        return Value::BigInt(b.into());
    }
    let fill = if b.last().is_some_and(|&x| x & 0x80 != 0) { 0xff } else { 0 };
    let mut a = [fill; 8];
    a[..b.len()].copy_from_slice(b);
    Value::Int(i64::from_le_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain data only: every name, persistent id, call and BUILD refused.
    struct Data;

    impl Loader for Data {
        type Obj = ();
        fn find_class(&mut self, module: &str, name: &str) -> Result<()> {
            Err(Error::Weights(format!("names {module}.{name}")))
        }
        fn persistent_load(&mut self, _: Value<()>) -> Result<Value<()>> {
            Err(Error::Weights("persistent id".into()))
        }
        fn reduce(&mut self, _: (), _: &[Value<()>]) -> Result<Value<()>> {
            Err(Error::Weights("reduce".into()))
        }
        fn build(&mut self, _: &Value<()>, _: &Value<()>) -> Result<()> {
            Err(Error::Weights("build".into()))
        }
    }

    fn run(p: &[u8]) -> Result<Value<()>> {
        load(&mut &p[..], p.len() as u64, &mut Data, "x.bin").map(|(v, n)| {
            assert_eq!(n, p.len() as u64);
            v
        })
    }

    #[test]
    fn reads_data() {
        // {'a': [1, -2, 300, 70000, (None, True, 1.5)], 'b': 'é'} with memo puts and gets, and an 8-byte LONG1.
        let p = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01J\xfe\xff\xff\xffM\x2c\x01J\x70\x11\x01\x00N\x88G\x3f\xf8\x00\x00\x00\x00\x00\x00\x87e\x8c\x01b\x8c\x02\xc3\xa9\x8a\x02\x00\x80h\x01\x87u.";
        let Value::Dict(d) = run(p).unwrap() else { panic!() };
        assert_eq!(d.len(), 2);
        let Value::List(l) = &d[0].1 else { panic!() };
        assert!(matches!(l[..4], [Value::Int(1), Value::Int(-2), Value::Int(300), Value::Int(70000)]));
        let Value::Tuple(t) = &l[4] else { panic!() };
        assert!(matches!(t[..], [Value::None, Value::Bool(true), Value::Float(x)] if x == 1.5));
        let Value::Str(b) = &d[1].0 else { panic!() };
        assert_eq!(&**b, "b");
        let Value::Tuple(t) = &d[1].1 else { panic!() };
        assert!(matches!(&t[..], [Value::Str(s), Value::Int(-32768), Value::Str(a)] if &**s == "é" && &**a == "a"));
    }

    #[test]
    fn refuses_what_a_state_dict_never_holds() {
        for (p, want) in [
            (&b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsq\x00\x85R."[..], "names os.system"),
            (b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93.", "names builtins.eval"),
            (b"\x80\x02(cos\nsystem\no.", "names os.system"),
            (b"\x80\x02]\x81.", "NEWOBJ"),
            (b"(i__builtin__\nobject\n.", "INST"),
            (b"\x80\x02C\x01a.", "a byte string"),
            (b"\x80\x06N.", "protocol 6"),
            (b"\x80\x02\xff.", "unknown opcode 0xff"),
            (b"\x80\x02N", "truncated"),
            (b"\x80\x02X\xff\xff\xff\x7fab.", "truncated"),
            (b"\x80\x02h\x05.", "memo GET of entry 5"),
            (b"\x80\x02.", "empty stack"),
            (b"\x80\x02K\x01K\x02a.", "APPEND to an integer"),
            (b"\x80\x02}(K\x01u.", "odd number"),
            (b"\x80\x02K\x01K\x02R.", "arguments are an integer"),
        ] {
            let e = run(p).unwrap_err().to_string();
            assert!(e.contains(want), "{p:?}: {e}");
        }
    }

    #[test]
    fn bounds_hold() {
        let deep = [b"\x80\x02".to_vec(), vec![b'('; MAX_STACK + 1], b".".to_vec()].concat();
        assert!(run(&deep).unwrap_err().to_string().contains("on its stack"));
        // A tuple in a tuple in a tuple ... a million deep (one byte a level): refused at MAX_DEPTH, never dropped
        // recursively a million deep.
        let nested = [b"\x80\x02)".to_vec(), vec![0x85; 1_000_000], b".".to_vec()].concat();
        assert!(run(&nested).unwrap_err().to_string().contains("nested more than 256 deep"));
        let nested = [b"\x80\x02]".to_vec(), [b"]".to_vec(), b"a".to_vec()].concat().repeat(300), b".".to_vec()].concat();
        assert!(run(&nested).is_ok(), "lists appended to lists: 2 deep");
        let nested = [b"\x80\x02".to_vec(), b"]".repeat(300), b"a".repeat(299), b".".to_vec()].concat();
        assert!(run(&nested).unwrap_err().to_string().contains("nested more than 256 deep"));
        // A list of 1,000 items fetched from the memo and appended to, over and over: each copy is charged.
        let mut p = b"\x80\x02](".to_vec();
        p.extend(std::iter::repeat_n(&b"K\x01"[..], 1000).flatten());
        p.extend(b"eq\x00");
        p.extend(std::iter::repeat_n(&b"0h\x00K\x01a"[..], MAX_COPIES / 1000 + 1).flatten());
        p.push(b'.');
        assert!(run(&p).unwrap_err().to_string().contains("elements copied"));
        // The same list fetched without changes costs nothing.
        let mut p = b"\x80\x02](K\x01eq\x00".to_vec();
        p.extend(std::iter::repeat_n(&b"0h\x00"[..], 10_000).flatten());
        p.push(b'.');
        assert!(run(&p).is_ok());
    }
}
