//! Importers (filled in below).
