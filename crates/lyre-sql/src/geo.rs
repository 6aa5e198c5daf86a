//! Harper's geospatial functions over GeoJSON (what Harper computes with turf):
//! distances and lengths on the haversine sphere (mean radius 6,371,008.8 m, in
//! kilometres unless a unit is named), areas in square metres (Chamberlain and
//! Duquette's spherical formula, as turf's), and the planar predicates and
//! difference of `geo`. Arguments are GeoJSON objects (geometries or features), or
//! text holding one.

use geo::{BooleanOps, ChamberlainDuquetteArea, Distance, Haversine, Length, MultiPolygon, Relate};
use lyre_core::{Object, Value};

use crate::error::{Result, SqlError};
use crate::ops;

/// The mean earth radius turf and `geo`'s haversine use, in metres.
const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// Metres in `unit` (turf's unit names).
fn per_metre(unit: &str) -> Result<f64> {
    Ok(match unit.to_ascii_lowercase().as_str() {
        "kilometers" | "kilometres" | "km" => 1e-3,
        "meters" | "metres" | "m" => 1.0,
        "miles" | "mi" => 1.0 / 1609.344,
        "nauticalmiles" => 1.0 / 1852.0,
        "feet" | "ft" => 3.28084,
        "yards" => 1.0936,
        "inches" => 39.37,
        "centimeters" | "centimetres" | "cm" => 100.0,
        "millimeters" | "millimetres" | "mm" => 1000.0,
        "radians" => 1.0 / EARTH_RADIUS_M,
        "degrees" => 180.0 / std::f64::consts::PI / EARTH_RADIUS_M,
        other => {
            return Err(SqlError::invalid(format!(
                "'{other}' is not a unit of length (kilometers, miles, meters, degrees…)"
            )));
        }
    })
}

/// The conversion from metres into the unit named by `unit` (kilometres when absent).
fn units(unit: Option<&Value>) -> Result<f64> {
    match unit {
        None | Some(Value::Null) => per_metre("kilometers"),
        Some(unit) => per_metre(&ops::text(unit)),
    }
}

/// A GeoJSON argument read into a geometry; `None` for `NULL`.
fn geometry(value: &Value, function: &str) -> Result<Option<geo::Geometry<f64>>> {
    let json: serde_json::Value = match value {
        Value::Null => return Ok(None),
        Value::String(text) => serde_json::from_str(text)
            .map_err(|err| SqlError::invalid(format!("{function}: the text is not GeoJSON: {err}")))?,
        other => serde_json::to_value(other).map_err(|err| SqlError::invalid(format!("{function}: {err}")))?,
    };
    let geojson = geojson::GeoJson::from_json_value(json)
        .map_err(|err| SqlError::invalid(format!("{function}: not GeoJSON: {err}")))?;
    let converted = match geojson {
        geojson::GeoJson::Geometry(g) => geo::Geometry::try_from(g),
        geojson::GeoJson::Feature(f) => geo::Geometry::try_from(f),
        geojson::GeoJson::FeatureCollection(c) => geo::Geometry::try_from(c),
    };
    converted.map(Some).map_err(|err| SqlError::invalid(format!("{function}: {err}")))
}

fn point(value: &Value, function: &str) -> Result<Option<geo::Point<f64>>> {
    match geometry(value, function)? {
        None => Ok(None),
        Some(geo::Geometry::Point(p)) => Ok(Some(p)),
        Some(_) => Err(SqlError::invalid(format!("{function} takes GeoJSON points"))),
    }
}

/// `geoDistance(p1, p2[, units])`.
pub fn distance(args: &[Value]) -> Result<Value> {
    let (Some(a), Some(b)) = (point(&args[0], "geoDistance")?, point(&args[1], "geoDistance")?) else {
        return Ok(Value::Null);
    };
    Ok(Value::Float(Haversine.distance(a, b) * units(args.get(2))?))
}

/// `geoNear(p1, p2, distance[, units])`: whether they are within the distance.
pub fn near(args: &[Value]) -> Result<Value> {
    let (Some(a), Some(b)) = (point(&args[0], "geoNear")?, point(&args[1], "geoNear")?) else {
        return Ok(Value::Null);
    };
    let Some(within) = ops::number(&args[2]) else {
        return Err(SqlError::invalid("geoNear needs a distance as its third argument"));
    };
    Ok(Value::Bool(Haversine.distance(a, b) * units(args.get(3))? <= within))
}

/// `geoLength(line[, units])`: the length of its lines.
pub fn length(args: &[Value]) -> Result<Value> {
    let Some(geometry) = geometry(&args[0], "geoLength")? else { return Ok(Value::Null) };
    let metres = match &geometry {
        geo::Geometry::LineString(line) => Haversine.length(line),
        geo::Geometry::MultiLineString(lines) => lines.iter().map(|l| Haversine.length(l)).sum(),
        geo::Geometry::Polygon(polygon) => Haversine.length(polygon.exterior()),
        _ => 0.0,
    };
    Ok(Value::Float(metres * units(args.get(1))?))
}

/// `geoArea(geometry)`: square metres.
pub fn area(args: &[Value]) -> Result<Value> {
    Ok(match geometry(&args[0], "geoArea")? {
        None => Value::Null,
        Some(geometry) => ops::from_f64(geometry.chamberlain_duquette_unsigned_area()),
    })
}

/// How two geometries relate, for `geoContains`, `geoEqual`, `geoCrosses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Predicate {
    /// The first contains the second.
    Contains,
    /// They are the same shape.
    Equal,
    /// They cross.
    Crosses,
}

/// Whether `predicate` holds between the two arguments.
pub fn relate(predicate: Predicate, args: &[Value]) -> Result<Value> {
    let name = format!("{predicate:?}");
    let (Some(a), Some(b)) = (geometry(&args[0], &name)?, geometry(&args[1], &name)?) else {
        return Ok(Value::Null);
    };
    let matrix = a.relate(&b);
    Ok(Value::Bool(match predicate {
        Predicate::Contains => matrix.is_contains(),
        Predicate::Equal => matrix.is_equal_topo(),
        Predicate::Crosses => matrix.is_crosses(),
    }))
}

fn polygons(geometry: geo::Geometry<f64>) -> Result<MultiPolygon<f64>> {
    match geometry {
        geo::Geometry::Polygon(p) => Ok(MultiPolygon::new(vec![p])),
        geo::Geometry::MultiPolygon(m) => Ok(m),
        _ => Err(SqlError::invalid("geoDifference takes polygons")),
    }
}

/// `geoDifference(a, b)`: the part of polygon `a` outside `b`, as a GeoJSON
/// feature (`NULL` when nothing is left).
pub fn difference(args: &[Value]) -> Result<Value> {
    let (Some(a), Some(b)) = (geometry(&args[0], "geoDifference")?, geometry(&args[1], "geoDifference")?) else {
        return Ok(Value::Null);
    };
    let left = polygons(a)?.difference(&polygons(b)?);
    let geometry = match left.0.len() {
        0 => return Ok(Value::Null),
        1 => geojson::Geometry::from(&left.0[0]),
        _ => geojson::Geometry::from(&left),
    };
    feature(serde_json::to_value(geometry).unwrap_or_default(), Value::Object(Object::default()))
}

/// `geoConvert(coordinates, type[, properties])`: a GeoJSON feature of that type.
pub fn convert(args: &[Value]) -> Result<Value> {
    let kind = match ops::text(&args[1]).to_ascii_lowercase().as_str() {
        "point" => "Point",
        "multipoint" => "MultiPoint",
        "linestring" => "LineString",
        "multilinestring" => "MultiLineString",
        "polygon" => "Polygon",
        "multipolygon" => "MultiPolygon",
        other => {
            return Err(SqlError::invalid(format!(
                "geoConvert cannot make a '{other}': point, multiPoint, lineString, multiLineString, polygon or multiPolygon"
            )));
        }
    };
    let coordinates = match &args[0] {
        Value::String(text) => serde_json::from_str(text)
            .map_err(|err| SqlError::invalid(format!("geoConvert: the coordinates are not JSON: {err}")))?,
        other => serde_json::to_value(other).unwrap_or_default(),
    };
    let geometry = serde_json::json!({"type": kind, "coordinates": coordinates});
    // Check the shape by reading it back.
    geometry_of_json(geometry.clone())?;
    let properties = match args.get(2) {
        None | Some(Value::Null) => Value::Object(Object::default()),
        // Properties given as JSON text are read (Harper keeps the text as it is).
        Some(Value::String(text)) => {
            serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.clone()))
        }
        Some(other) => other.clone(),
    };
    feature(geometry, properties)
}

fn geometry_of_json(json: serde_json::Value) -> Result<()> {
    let geometry =
        geojson::Geometry::from_json_value(json).map_err(|err| SqlError::invalid(format!("geoConvert: {err}")))?;
    geo::Geometry::<f64>::try_from(geometry).map_err(|err| SqlError::invalid(format!("geoConvert: {err}")))?;
    Ok(())
}

fn feature(geometry: serde_json::Value, properties: Value) -> Result<Value> {
    let mut out = Object::default();
    out.insert("type".into(), Value::String("Feature".into()));
    out.insert("properties".into(), properties);
    let geometry: Value = serde_json::from_value(geometry).map_err(|err| SqlError::invalid(err.to_string()))?;
    out.insert("geometry".into(), geometry);
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Value {
        serde_json::from_str(text).expect("JSON")
    }

    #[test]
    fn distances_lengths_and_areas_match_hand_computed_values() {
        // One degree of longitude on the equator: 2πR/360 = 111.19508 km.
        let a = json(r#"{"type":"Point","coordinates":[0,0]}"#);
        let b = Value::String(r#"{"type":"Point","coordinates":[1,0]}"#.into());
        let Value::Float(km) = distance(&[a.clone(), b.clone()]).unwrap() else { panic!() };
        assert!((km - 111.195_08).abs() < 1e-4, "{km}");
        let Value::Float(miles) = distance(&[a.clone(), b.clone(), Value::String("miles".into())]).unwrap() else {
            panic!()
        };
        assert!((miles - 69.093_5).abs() < 1e-3, "{miles}");
        assert_eq!(near(&[a.clone(), b.clone(), Value::Int(112)]).unwrap(), Value::Bool(true));
        assert_eq!(near(&[a.clone(), b, Value::Int(111)]).unwrap(), Value::Bool(false));
        let line = json(
            r#"{"type":"Feature","properties":{},"geometry":{"type":"LineString","coordinates":[[0,0],[1,0],[2,0]]}}"#,
        );
        let Value::Float(km) = length(&[line]).unwrap() else { panic!() };
        assert!((km - 222.390_16).abs() < 1e-3, "{km}");
        // A 1°×1° box at the equator: R²·Δλ·(sin φ2 − sin φ1) with R = 6,378,137 m.
        let square = json(r#"{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}"#);
        let expected = 6_378_137f64.powi(2) * 1f64.to_radians() * 1f64.to_radians().sin();
        let m2 = ops::number(&area(std::slice::from_ref(&square)).unwrap()).expect("an area");
        assert!((m2 / expected - 1.0).abs() < 1e-6, "{m2} vs {expected}");
        assert!(distance(&[square, a]).is_err(), "a polygon is not a point");
    }

    #[test]
    fn predicates_difference_and_conversion() {
        let big = json(r#"{"type":"Polygon","coordinates":[[[0,0],[4,0],[4,4],[0,4],[0,0]]]}"#);
        let inside = json(r#"{"type":"Point","coordinates":[1,1]}"#);
        let outside = json(r#"{"type":"Point","coordinates":[5,5]}"#);
        assert_eq!(relate(Predicate::Contains, &[big.clone(), inside]).unwrap(), Value::Bool(true));
        assert_eq!(relate(Predicate::Contains, &[big.clone(), outside]).unwrap(), Value::Bool(false));
        assert_eq!(relate(Predicate::Equal, &[big.clone(), big.clone()]).unwrap(), Value::Bool(true));
        let across = json(r#"{"type":"LineString","coordinates":[[-1,2],[5,2]]}"#);
        assert_eq!(relate(Predicate::Crosses, &[across, big.clone()]).unwrap(), Value::Bool(true));
        let right = json(r#"{"type":"Polygon","coordinates":[[[2,0],[4,0],[4,4],[2,4],[2,0]]]}"#);
        let Value::Object(left) = difference(&[big.clone(), right]).unwrap() else { panic!("a feature") };
        assert_eq!(left["type"], Value::String("Feature".into()));
        let Value::Object(shape) = &left["geometry"] else { panic!("a geometry") };
        assert_eq!(shape["type"], Value::String("Polygon".into()));
        let m2 = ops::number(&area(&[left["geometry"].clone()]).unwrap()).expect("an area");
        let all = ops::number(&area(std::slice::from_ref(&big)).unwrap()).expect("an area");
        assert!((m2 / all - 0.5).abs() < 0.01, "half the box is left: {m2} of {all}");
        let point =
            convert(&[json("[1.5, 2]"), Value::String("point".into()), Value::String(r#"{"name":"HQ"}"#.into())])
                .unwrap();
        assert_eq!(
            point,
            json(r#"{"type":"Feature","properties":{"name":"HQ"},"geometry":{"type":"Point","coordinates":[1.5,2]}}"#)
        );
        assert!(convert(&[json("[1.5, 2]"), Value::String("circle".into())]).is_err());
        assert!(convert(&[json("[[1.5, 2]]"), Value::String("point".into())]).is_err());
    }
}
