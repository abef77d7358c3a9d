// atb view: draw the plots (plotly.js, served by this app) and keep the live part of a page current.
// The live part is the element with data-live="URL": when /api/status reports a new chain head (or a new
// verification result), that URL's HTML replaces the element's content. Polling every second keeps a new
// verdict on screen within two seconds without a socket.
(function () {
  "use strict";
  function drawPlots(root) {
    if (typeof Plotly === "undefined") { return; }
    root.querySelectorAll("[data-plot]").forEach(function (el) {
      var spec = document.getElementById(el.getAttribute("data-plot"));
      if (!spec || el.getAttribute("data-drawn") === "1") { return; }
      var fig = JSON.parse(spec.textContent);
      Plotly.newPlot(el, fig.data, fig.layout, {displaylogo: false, responsive: true});
      el.setAttribute("data-drawn", "1");
      el.on && el.on("plotly_click", function (ev) {
        var p = ev.points && ev.points[0];
        if (p && p.customdata) { window.location.href = "/verdict/" + p.customdata; }
      });
    });
  }
  var version = null;
  function poll() {
    var ms = parseInt(document.body.getAttribute("data-poll-ms") || "1000", 10);
    fetch("/api/status", {cache: "no-store"}).then(function (r) { return r.json(); }).then(function (s) {
      if (version !== null && s.version !== version) {
        var live = document.querySelector("[data-live]");
        if (live) {
          fetch(live.getAttribute("data-live"), {cache: "no-store"}).then(function (r) { return r.text(); })
            .then(function (html) { live.innerHTML = html; document.body.setAttribute("data-updated", s.version); });
        }
        var banner = document.getElementById("verify-banner");
        document.getElementById("head-seq").textContent = s.head_seq;
        if (banner && s.verify.state !== "pending") {
          var st = document.getElementById("verify-state");
          if (st && st.getAttribute("data-state").indexOf("verified") === 0 && s.verify.state === "verified") {
            st.textContent = s.verify.head_seq === s.head_seq ? "store verified up to chain head " + s.head_seq
              : "store verified up to chain_seq " + s.verify.head_seq + "; newer rows are being verified";
          }
        }
      }
      version = s.version;
    }).catch(function () {}).then(function () { setTimeout(poll, ms); });
  }
  document.addEventListener("DOMContentLoaded", function () { drawPlots(document); poll(); });
})();
