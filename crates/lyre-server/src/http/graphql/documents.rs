//! GraphQL documents parsed once and kept by their text: parsing took a fifth of a
//! small query's CPU, and clients send the same few documents again and again (the
//! values change through variables).

use std::collections::HashMap;
use std::sync::Arc;

use apollo_compiler::ast::Document;
use apollo_compiler::parser::Parser;

/// How many parsed documents are kept; past it the cache starts over.
const CACHED_DOCUMENTS: usize = 512;

/// The longest document text kept parsed.
const CACHED_TEXT: usize = 16 << 10;

/// The most tokens a document may have; parsing stops there (Apollo Router's
/// default). Without a limit the parser goes on past its nesting limit, keeping an
/// error for each token: two megabytes of `{` held 1.3 GB.
const MAX_TOKENS: usize = 15_000;

/// A document that does not parse: the first problem and where it is.
#[derive(Debug)]
pub struct SyntaxError {
    /// `Syntax Error: ...`.
    pub message: String,
    /// Line and column, when known.
    pub at: Option<(usize, usize)>,
}

/// GraphQL documents already parsed, by their text (at most [`CACHED_DOCUMENTS`],
/// each at most [`CACHED_TEXT`] bytes).
#[derive(Default)]
pub struct Documents {
    parsed: parking_lot::Mutex<HashMap<String, Arc<Document>>>,
}

impl Documents {
    /// The document `text` parses to, from the cache when it was parsed before.
    pub fn parse(&self, text: &str) -> Result<Arc<Document>, SyntaxError> {
        if let Some(document) = self.parsed.lock().get(text) {
            return Ok(document.clone());
        }
        let parsed = Parser::new().token_limit(MAX_TOKENS).parse_ast(text, "query.graphql");
        let document = Arc::new(parsed.map_err(|with_errors| {
            let first = with_errors.errors.iter().next();
            let at = first.as_ref().and_then(|d| d.line_column_range()).map(|r| (r.start.line, r.start.column));
            let message = first.map(|d| format!("Syntax Error: {}", d.error)).unwrap_or_else(|| "Syntax Error".into());
            SyntaxError { message, at }
        })?);
        if text.len() <= CACHED_TEXT {
            let mut parsed = self.parsed.lock();
            if parsed.len() >= CACHED_DOCUMENTS {
                parsed.clear();
            }
            parsed.insert(text.to_string(), document.clone());
        }
        Ok(document)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_parsed_once_and_the_cache_stays_bounded() {
        let documents = Documents::default();
        let first = documents.parse("{ products { id } }").unwrap();
        let again = documents.parse("{ products { id } }").unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the second request reuses the parse");
        assert!(matches!(documents.parse("{ products { id "), Err(SyntaxError { at: Some(_), .. })));
        assert_eq!(documents.parsed.lock().len(), 1, "a document that fails to parse is not kept");
        for i in 0..CACHED_DOCUMENTS + 10 {
            documents.parse(&format!("{{ t{i} {{ id }} }}")).unwrap();
        }
        assert!(documents.parsed.lock().len() <= CACHED_DOCUMENTS);
        let long = format!("{{ products(name: \"{}\") {{ id }} }}", "n".repeat(CACHED_TEXT));
        documents.parse(&long).unwrap();
        assert!(!documents.parsed.lock().contains_key(&long), "long documents are not kept");
        let many = format!("{{ products {{ {} }} }}", "id ".repeat(MAX_TOKENS));
        assert!(matches!(documents.parse(&many), Err(SyntaxError { message, .. }) if message.contains("token limit")));
    }
}
