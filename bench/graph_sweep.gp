# I/O amplification against cache size, from `build/graph sweep FILE OUT.tsv`.
#   gnuplot -e "in='bench/results/graph-sweep-vm.tsv'; out='bench/results/graph-sweep-vm.png'" bench/graph_sweep.gp
set terminal pngcairo size 1100,460 font 'sans,10'
set output out
set multiplot layout 1,2 title "gpumem graph demo: GAP-kron scale 20 (128 MiB CSR) through the cache, 4 KiB lines, make graph-sweep" font 'sans,12'
set logscale x 2
set xlabel 'cache size / graph size'
set grid
set format x '1/%.0f'
set xtics ('1/32' 1.0/32, '1/16' 1.0/16, '1/8' 1.0/8, '1/4' 1.0/4, '1/2' 1.0/2, '1' 1)
set title 'I/O amplification (bytes read / bytes needed)'
set logscale y
set ylabel 'amplification'
set key top right
plot in using 1:2 with linespoints title 'BFS, frontier in discovery order', \
     in using 1:3 with linespoints title 'BFS, frontier in vertex order', \
     in using 1:4 with linespoints title 'CC (label propagation)', \
     1 with lines dashtype 2 lc rgb 'gray' title 'no amplification'
set title 'Cache hit rate (acquires that found the line)'
unset logscale y
set ylabel 'hit rate'
set yrange [0:1]
plot in using 1:5 with linespoints title 'BFS, discovery order', \
     in using 1:6 with linespoints title 'BFS, vertex order', \
     in using 1:7 with linespoints title 'CC'
unset multiplot
