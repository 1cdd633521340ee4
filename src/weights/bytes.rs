//! Where a weights file's bytes come from: a slice, or a file that lives outside this memory (the browser's JS
//! `Uint8Array`), read in pieces. Every reader (safetensors, GGUF, the stream) takes a [`ByteSource`]; it sits
//! below all of them so that none imports another for it.

/// The bytes of a file, read in pieces ([`super::Weights::from_safetensors_source`], [`super::gguf::read_bert`]): a slice, or (in the browser) the
/// JS `Uint8Array` the file was downloaded into.
pub trait ByteSource {
    /// The file's length in bytes.
    fn byte_len(&self) -> usize;
    /// Fills `out` with the bytes at `at..at + out.len()`, which lie within [`ByteSource::byte_len`].
    fn read(&self, at: usize, out: &mut [u8]);
    /// The whole file, when it is in this memory already (a parser then reads it in place).
    fn as_slice(&self) -> Option<&[u8]> {
        None
    }
}

impl ByteSource for [u8] {
    fn byte_len(&self) -> usize {
        self.len()
    }
    fn read(&self, at: usize, out: &mut [u8]) {
        out.copy_from_slice(&self[at..at + out.len()]);
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl ByteSource for &[u8] {
    fn byte_len(&self) -> usize {
        self.len()
    }
    fn read(&self, at: usize, out: &mut [u8]) {
        (**self).read(at, out);
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl ByteSource for Vec<u8> {
    fn byte_len(&self) -> usize {
        self.len()
    }
    fn read(&self, at: usize, out: &mut [u8]) {
        self.as_slice().read(at, out);
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }
}

/// The `bytes` bytes at `at` in `src` as little-endian values of `T`, read straight into the returned storage
/// (wasm's and x86's order already; a big-endian host swaps them after).
pub(crate) fn read_le<T: bytemuck::Pod + Default>(src: &(impl ByteSource + ?Sized), at: usize, bytes: usize) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let mut v = vec![T::default(); bytes / size];
    let raw: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    src.read(at, raw);
    if cfg!(target_endian = "big") {
        raw.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
    v
}
