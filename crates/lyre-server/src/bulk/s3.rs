//! Objects in S3 (or an S3-compatible store) for `import_from_s3` and
//! `export_to_s3`, through `object_store`'s client.
//!
//! A request names the object with Harper's `s3` parameter object
//! (`aws_access_key_id`, `aws_secret_access_key`, `bucket`, `key`, `region`). Where
//! S3 is comes from the server's environment, not the request: AWS's public
//! endpoints, or `AWS_ENDPOINT_URL` (the AWS SDKs' own variable) for a compatible
//! store such as MinIO; a request cannot point the server at an address of its
//! choosing.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use lyre_core::Value;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStoreExt as _, RetryConfig, WriteMultipart};

use super::chunks::{Chunks, pipe};

/// The environment variable naming an S3-compatible endpoint.
pub const ENDPOINT_VARIABLE: &str = "AWS_ENDPOINT_URL";
/// How long one request to S3 may take before it is retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request keeps being retried.
const RETRY_FOR: Duration = Duration::from_secs(60);
/// Parts an upload sends at once (each up to 5 MiB in memory).
const UPLOAD_PARTS_IN_FLIGHT: usize = 2;

/// One object: its bucket and key, and the credentials to reach it.
#[derive(Clone)]
pub struct Object {
    access_key_id: String,
    secret_access_key: String,
    bucket: String,
    /// The object's key.
    pub key: String,
    region: String,
}

impl std::fmt::Debug for Object {
    /// Never shows the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{} ({})", self.bucket, self.key, self.region)
    }
}

impl Object {
    /// Reads Harper's `s3` parameter; every field missing, empty or not a string is
    /// named, in Harper's words, joined by `,`.
    pub fn from_param(value: Option<Value>) -> Result<Object, String> {
        let Some(Value::Object(mut fields)) = value else { return Err("S3 can't be blank".into()) };
        let mut problems = Vec::new();
        let mut field = |name: &str, label: &str| match fields.shift_remove(name) {
            Some(Value::String(text)) if !text.is_empty() => text,
            None | Some(Value::Null) | Some(Value::String(_)) => {
                problems.push(format!("S3 {label} can't be blank"));
                String::new()
            }
            Some(_) => {
                problems.push(format!("S3 {label} must be a 'String' value"));
                String::new()
            }
        };
        let object = Object {
            access_key_id: field("aws_access_key_id", "aws access key id"),
            secret_access_key: field("aws_secret_access_key", "aws secret access key"),
            bucket: field("bucket", "bucket"),
            key: field("key", "key"),
            region: field("region", "region"),
        };
        // The region and bucket become part of the address S3 is reached at: only
        // what AWS allows in them, so a request cannot steer the server elsewhere.
        if !object.region.is_empty() && !valid_region(&object.region) {
            problems.push(format!("S3 region '{}' is not a region name (like us-east-1)", object.region));
        }
        if !object.bucket.is_empty() && !valid_bucket(&object.bucket) {
            problems.push(format!("S3 bucket '{}' is not a valid bucket name", object.bucket));
        }
        if problems.is_empty() { Ok(object) } else { Err(problems.join(",")) }
    }

    /// This object with `suffix` appended to its key (an export's `.csv`).
    pub fn with_suffix(mut self, suffix: &str) -> Object {
        self.key.push_str(suffix);
        self
    }

    /// The bucket's client.
    fn store(&self) -> Result<AmazonS3, String> {
        let mut builder = AmazonS3Builder::new()
            .with_access_key_id(&self.access_key_id)
            .with_secret_access_key(&self.secret_access_key)
            .with_bucket_name(&self.bucket)
            .with_region(&self.region)
            .with_client_options(object_store::ClientOptions::new().with_timeout(REQUEST_TIMEOUT))
            .with_retry(RetryConfig { max_retries: 3, retry_timeout: RETRY_FOR, ..RetryConfig::default() });
        if let Ok(endpoint) = std::env::var(ENDPOINT_VARIABLE)
            && !endpoint.is_empty()
        {
            builder = builder.with_allow_http(endpoint.starts_with("http://")).with_endpoint(endpoint);
        }
        builder.build().map_err(|err| format!("cannot reach S3: {err}"))
    }

    fn path(&self) -> Result<Path, String> {
        Path::parse(&self.key).map_err(|err| format!("'{}' is not a valid S3 key: {err}", self.key))
    }

    /// Opens the object for reading: the reader of its bytes, and the pump that
    /// must be driven beside the reader's consumer. Fails with S3's reason when the
    /// object cannot be read.
    pub async fn open(&self) -> Result<(Chunks, impl Future<Output = ()> + use<>), String> {
        let got = self.store()?.get(&self.path()?).await.map_err(|err| self.failed(&err))?;
        let described = self.clone();
        Ok(pipe(got.into_stream().map(move |chunk| chunk.map_err(|err| described.failed(&err)))))
    }

    /// Starts writing the object (a multipart upload: parts of 5 MiB, at most
    /// [`UPLOAD_PARTS_IN_FLIGHT`] in memory).
    pub async fn create(&self) -> Result<Upload, String> {
        let upload = self.store()?.put_multipart(&self.path()?).await.map_err(|err| self.failed(&err))?;
        Ok(Upload { object: self.clone(), writer: WriteMultipart::new(upload) })
    }

    fn failed(&self, err: &object_store::Error) -> String {
        let reason = match err {
            object_store::Error::NotFound { .. } => "The specified key does not exist.".to_string(),
            other => other.to_string(),
        };
        format!("S3 object {self:?}: {reason}")
    }
}

/// AWS region names: lowercase letters, digits and dashes (`us-east-1`).
fn valid_region(region: &str) -> bool {
    (1..=32).contains(&region.len())
        && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// S3's bucket naming rules: 3 to 63 lowercase letters, digits, dots and dashes,
/// starting and ending with a letter or digit.
fn valid_bucket(bucket: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = bucket.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes.iter().all(|&b| alnum(b) || b == b'.' || b == b'-')
        && bytes.first().is_some_and(|&b| alnum(b))
        && bytes.last().is_some_and(|&b| alnum(b))
}

/// An object being written.
pub struct Upload {
    object: Object,
    writer: WriteMultipart,
}

/// A finished upload, as Harper reports it (`ETag`, `VersionId`).
pub struct Uploaded {
    /// The object's entity tag.
    pub e_tag: Option<String>,
    /// Its version, where the bucket keeps versions.
    pub version: Option<String>,
}

impl Upload {
    /// Appends `bytes`, waiting while too many parts are in flight.
    pub async fn write(&mut self, bytes: Bytes) -> Result<(), String> {
        self.writer.wait_for_capacity(UPLOAD_PARTS_IN_FLIGHT).await.map_err(|err| self.object.failed(&err))?;
        self.writer.put(bytes);
        Ok(())
    }

    /// Completes the upload.
    pub async fn finish(self) -> Result<Uploaded, String> {
        let done = self.writer.finish().await.map_err(|err| self.object.failed(&err))?;
        Ok(Uploaded { e_tag: done.e_tag, version: done.version })
    }

    /// Abandons the upload (its parts are deleted).
    pub async fn abort(self) {
        if let Err(err) = self.writer.abort().await {
            tracing::warn!(object = ?self.object, error = %err, "an abandoned S3 upload could not be cleaned up");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_and_buckets_are_only_what_aws_allows() {
        for region in ["us-east-1", "eu-central-2", "auto"] {
            assert!(valid_region(region), "{region}");
        }
        for region in ["", "x@evil.host/#", "us east", "US-EAST-1", "a.b", &"a".repeat(33)] {
            assert!(!valid_region(region), "{region}");
        }
        for bucket in ["lyre-test", "my.bucket.1", "abc"] {
            assert!(valid_bucket(bucket), "{bucket}");
        }
        for bucket in ["ab", "-lead", "trail-", "Upper", "a/b", "evil.host#", &"a".repeat(64)] {
            assert!(!valid_bucket(bucket), "{bucket}");
        }
        let param = |region: &str| {
            let mut fields = lyre_core::Object::default();
            for (key, value) in [
                ("aws_access_key_id", "k"),
                ("aws_secret_access_key", "s"),
                ("bucket", "b.ok"),
                ("key", "a.csv"),
                ("region", region),
            ] {
                fields.insert(key.into(), value.into());
            }
            Object::from_param(Some(Value::Object(fields)))
        };
        assert!(param("us-east-1").is_ok());
        assert_eq!(
            param("x@evil.host/#").unwrap_err(),
            "S3 region 'x@evil.host/#' is not a region name (like us-east-1)"
        );
    }
}
