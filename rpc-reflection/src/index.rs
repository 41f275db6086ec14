//! The descriptor index: the registered files by name, and every symbol and extension
//! mapped to the file that defines it. Built once, then read by every stream (no locks).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;
use prost::Message as _;
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
};

use crate::Error;

/// A `FileDescriptorSet` whose files stay encoded: each file is answered with the bytes it
/// was registered with (custom options and unknown fields included, which decoding into
/// `prost_types` would drop), shared and never copied.
#[derive(Clone, PartialEq, prost::Message)]
struct EncodedSet {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    file: Vec<Bytes>,
}

/// One registered `.proto` file.
#[derive(Debug)]
struct File {
    /// Its path, as imports name it (`grpc/health/v1/health.proto`).
    name: String,
    /// Its `FileDescriptorProto`, encoded as registered.
    encoded: Bytes,
    /// The files it imports, as indexes into [`Index::files`].
    dependencies: Vec<usize>,
}

/// What kind of definition a symbol names (only messages can be extended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Message,
    Other,
}

/// Registered descriptors, looked up as the reflection protocol asks.
///
/// Invariants: every file's dependencies are registered (no dangling import); a symbol
/// or an extension (extendee, number) is defined by exactly one file; a file name is
/// registered once (the same file in two sets is kept once, when the two agree).
#[derive(Default)]
pub(crate) struct Index {
    files: Vec<File>,
    by_name: HashMap<String, usize>,
    /// Full names without the leading dot: packages' types, services, methods, fields,
    /// oneofs, enum values and extensions.
    symbols: HashMap<String, (usize, Kind)>,
    /// (extendee full name, field number) to the file declaring the extension.
    extensions: HashMap<(String, i32), usize>,
    /// Extension numbers by extendee full name, ascending.
    extension_numbers: HashMap<String, Vec<i32>>,
    /// The services `list_services` answers, sorted.
    services: Vec<String>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The counts, not the contents: a set holds thousands of symbols.
        f.debug_struct("Index")
            .field("files", &self.files.len())
            .field("symbols", &self.symbols.len())
            .field("extensions", &self.extensions.len())
            .field("services", &self.services)
            .finish()
    }
}

impl Index {
    /// Indexes the encoded `FileDescriptorSet`s `sets`; lists the services named in
    /// `listed`, or every service of the sets when it is `None`.
    ///
    /// # Errors
    /// A set or file that does not decode, two different files of one name, a symbol or
    /// extension defined twice, an import no set holds, or a listed service no file
    /// defines.
    pub(crate) fn build(sets: &[Bytes], listed: Option<&[String]>) -> Result<Index, Error> {
        let mut index = Index::default();
        let mut decoded = Vec::new();
        for (set_index, set) in sets.iter().enumerate() {
            let set = EncodedSet::decode(set.clone()).map_err(|source| Error::Decode {
                what: format!("descriptor set #{set_index}"),
                source,
            })?;
            for encoded in set.file {
                let file = FileDescriptorProto::decode(encoded.clone()).map_err(|source| {
                    Error::Decode {
                        what: format!("a file of descriptor set #{set_index}"),
                        source,
                    }
                })?;
                index.add_file(file, encoded, &mut decoded)?;
            }
        }
        for (file_index, file) in decoded.iter().enumerate() {
            index.link(file_index, file)?;
            index.add_symbols(file_index, file)?;
        }
        index.services = match listed {
            Some(names) => {
                for name in names {
                    if !decoded.iter().any(|file| defines_service(file, name)) {
                        return Err(Error::UnknownService { name: name.clone() });
                    }
                }
                names.to_vec()
            }
            None => decoded.iter().flat_map(service_names).collect(),
        };
        index.services.sort_unstable();
        index.services.dedup();
        for numbers in index.extension_numbers.values_mut() {
            numbers.sort_unstable();
        }
        Ok(index)
    }

    /// Registers `file` unless a file of its name is already there; then the two must
    /// agree (source info aside: the same file compiled twice may differ in comments'
    /// positions).
    fn add_file(
        &mut self,
        file: FileDescriptorProto,
        encoded: Bytes,
        decoded: &mut Vec<FileDescriptorProto>,
    ) -> Result<(), Error> {
        let name = file.name().to_owned();
        match self.by_name.entry(name.clone()) {
            Entry::Occupied(existing) => {
                let strip = |f: &FileDescriptorProto| FileDescriptorProto {
                    source_code_info: None,
                    ..f.clone()
                };
                if strip(&decoded[*existing.get()]) != strip(&file) {
                    return Err(Error::ConflictingFile { name });
                }
            }
            Entry::Vacant(slot) => {
                slot.insert(self.files.len());
                self.files.push(File {
                    name,
                    encoded,
                    dependencies: Vec::new(),
                });
                decoded.push(file);
            }
        }
        Ok(())
    }

    /// Resolves `file`'s imports to indexes.
    fn link(&mut self, file_index: usize, file: &FileDescriptorProto) -> Result<(), Error> {
        let mut dependencies = Vec::with_capacity(file.dependency.len());
        for dependency in &file.dependency {
            match self.by_name.get(dependency) {
                Some(&index) => dependencies.push(index),
                None => {
                    return Err(Error::MissingDependency {
                        file: file.name().to_owned(),
                        dependency: dependency.clone(),
                    })
                }
            }
        }
        self.files[file_index].dependencies = dependencies;
        Ok(())
    }

    /// Indexes every symbol and extension `file` defines.
    fn add_symbols(&mut self, file_index: usize, file: &FileDescriptorProto) -> Result<(), Error> {
        let mut symbols = Symbols {
            index: self,
            file: file_index,
        };
        let scope = file.package();
        for message in &file.message_type {
            symbols.message(scope, message)?;
        }
        for enumeration in &file.enum_type {
            symbols.enumeration(scope, enumeration)?;
        }
        for extension in &file.extension {
            symbols.extension(scope, extension)?;
        }
        for service in &file.service {
            let service_name = join(scope, service.name());
            for method in &service.method {
                symbols.add(join(&service_name, method.name()), Kind::Other)?;
            }
            symbols.add(service_name, Kind::Other)?;
        }
        Ok(())
    }

    /// The services to list, sorted.
    pub(crate) fn services(&self) -> &[String] {
        &self.services
    }

    /// The file named `name` and its transitive imports (see [`Index::with_imports`]).
    pub(crate) fn file_by_name(&self, name: &str) -> Option<Vec<Bytes>> {
        self.by_name.get(name).map(|&file| self.with_imports(file))
    }

    /// The file defining `symbol` (a full name; a leading dot is allowed) and its
    /// transitive imports.
    pub(crate) fn file_containing_symbol(&self, symbol: &str) -> Option<Vec<Bytes>> {
        let symbol = symbol.strip_prefix('.').unwrap_or(symbol);
        self.symbols
            .get(symbol)
            .map(|&(file, _)| self.with_imports(file))
    }

    /// The file declaring extension `number` of message `extendee`, and its imports.
    pub(crate) fn file_containing_extension(
        &self,
        extendee: &str,
        number: i32,
    ) -> Option<Vec<Bytes>> {
        let extendee = extendee.strip_prefix('.').unwrap_or(extendee);
        self.extensions
            .get(&(extendee.to_owned(), number))
            .map(|&file| self.with_imports(file))
    }

    /// The extension numbers of message `extendee` (empty when it has none); `None` when
    /// no registered file defines a message of that name.
    pub(crate) fn extension_numbers(&self, extendee: &str) -> Option<&[i32]> {
        let extendee = extendee.strip_prefix('.').unwrap_or(extendee);
        match self.symbols.get(extendee) {
            Some((_, Kind::Message)) => Some(
                self.extension_numbers
                    .get(extendee)
                    .map_or(&[][..], Vec::as_slice),
            ),
            _ => None,
        }
    }

    /// File `file`'s encoding, then those of the files it imports, directly or not, each
    /// once (breadth first): what a client needs to build the file without the `.proto`
    /// files. The requested file comes first, as gRPC's own servers answer.
    fn with_imports(&self, file: usize) -> Vec<Bytes> {
        let mut seen = HashSet::from([file]);
        let mut queue = VecDeque::from([file]);
        let mut answer = Vec::new();
        while let Some(next) = queue.pop_front() {
            let next = &self.files[next];
            answer.push(next.encoded.clone());
            for &dependency in &next.dependencies {
                if seen.insert(dependency) {
                    queue.push_back(dependency);
                }
            }
        }
        answer
    }
}

/// The symbols of one file being added to an index.
struct Symbols<'a> {
    index: &'a mut Index,
    file: usize,
}

impl Symbols<'_> {
    fn add(&mut self, name: String, kind: Kind) -> Result<(), Error> {
        match self.index.symbols.entry(name) {
            Entry::Occupied(existing) => Err(Error::DuplicateSymbol {
                symbol: existing.key().clone(),
                first: self.index.files[existing.get().0].name.clone(),
                second: self.index.files[self.file].name.clone(),
            }),
            Entry::Vacant(slot) => {
                slot.insert((self.file, kind));
                Ok(())
            }
        }
    }

    /// A message in `scope`, its fields and oneofs, and everything nested in it.
    fn message(&mut self, scope: &str, message: &DescriptorProto) -> Result<(), Error> {
        let name = join(scope, message.name());
        for field in &message.field {
            self.add(join(&name, field.name()), Kind::Other)?;
        }
        for oneof in &message.oneof_decl {
            self.add(join(&name, oneof.name()), Kind::Other)?;
        }
        for nested in &message.nested_type {
            self.message(&name, nested)?;
        }
        for enumeration in &message.enum_type {
            self.enumeration(&name, enumeration)?;
        }
        for extension in &message.extension {
            self.extension(&name, extension)?;
        }
        self.add(name, Kind::Message)
    }

    /// An enum in `scope` and its values.
    ///
    /// A value is found both as protobuf scopes it, a sibling of its enum
    /// (`pkg.RED` for `pkg.Color.RED`, as protoc's descriptor pool names it and grpc's
    /// C++ server finds it), and under its enum (`pkg.Color.RED`, as some clients ask).
    /// Both are unambiguous: protoc refuses two values of one name in a scope, and an
    /// enum has nothing else inside it.
    fn enumeration(&mut self, scope: &str, enumeration: &EnumDescriptorProto) -> Result<(), Error> {
        let name = join(scope, enumeration.name());
        for value in &enumeration.value {
            self.add(join(scope, value.name()), Kind::Other)?;
            self.add(join(&name, value.name()), Kind::Other)?;
        }
        self.add(name, Kind::Other)
    }

    /// An extension declared in `scope` (a package or a message).
    fn extension(&mut self, scope: &str, extension: &FieldDescriptorProto) -> Result<(), Error> {
        self.add(join(scope, extension.name()), Kind::Other)?;
        let extendee = extension.extendee();
        let extendee = extendee.strip_prefix('.').unwrap_or(extendee).to_owned();
        let number = extension.number();
        match self.index.extensions.entry((extendee.clone(), number)) {
            Entry::Occupied(existing) => {
                return Err(Error::DuplicateExtension {
                    extendee,
                    number,
                    first: self.index.files[*existing.get()].name.clone(),
                    second: self.index.files[self.file].name.clone(),
                })
            }
            Entry::Vacant(slot) => {
                slot.insert(self.file);
            }
        }
        self.index
            .extension_numbers
            .entry(extendee)
            .or_default()
            .push(number);
        Ok(())
    }
}

/// `scope.name`, or `name` in the root scope.
fn join(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_owned()
    } else {
        format!("{scope}.{name}")
    }
}

fn service_names(file: &FileDescriptorProto) -> impl Iterator<Item = String> + '_ {
    file.service
        .iter()
        .map(move |service| join(file.package(), service.name()))
}

fn defines_service(file: &FileDescriptorProto, name: &str) -> bool {
    service_names(file).any(|service| service == name)
}
